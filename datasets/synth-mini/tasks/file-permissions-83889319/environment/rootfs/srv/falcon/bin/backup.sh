#!/bin/sh
# falcon: backup.sh
echo 576349
