#!/bin/bash
# Verifier for find-leaked-secret; installs pytest, runs the checks, records the reward.
mkdir -p /logs/verifier
pip install pytest==8.4.1
python -m pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
