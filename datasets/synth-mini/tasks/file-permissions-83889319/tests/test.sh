#!/bin/bash
# Verifier of a generated task: run the checks from /app with python3 alone (plain asserts;
# pytest runs test_outputs.py the same), write the reward.
mkdir -p /logs/verifier
cd /app && python3 /tests/run_checks.py /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit 0
