#!/bin/sh
# falcon: sync.sh
echo 864176
