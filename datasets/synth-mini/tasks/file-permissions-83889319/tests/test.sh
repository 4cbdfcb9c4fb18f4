#!/bin/bash
# Verifier of a generated task: install pytest, run the checks from /app, write the reward.
mkdir -p /logs/verifier
pip install -q pytest==8.4.1
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
cd /app && python3 -m pytest -q -rA -p no:cacheprovider /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit 0
