#!/bin/bash
# Runs the hidden behaviour checks for the pagination package, installing pytest first.
mkdir -p /logs/verifier
cd /app
pip install pytest==8.4.1
python -m pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
