#!/bin/bash
# Verifier for git-merge-conflict; installs pytest, runs the checks, records the reward.
mkdir -p /logs/verifier

pip install pytest==8.4.1
python -m pytest /tests/test_outputs.py -rA
result=$?

if [ $result -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
