#!/bin/sh
# falcon: deploy.sh
echo 316703
