#!/bin/bash
# Step "create": /app/notes.txt holds the line hello; writes the reward (1 pass, 0 fail).
mkdir -p /logs/verifier
if [ "$(cat /app/notes.txt 2>/dev/null)" = "hello" ]; then
  echo "PASSED: /app/notes.txt says hello"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAILED: /app/notes.txt is missing or does not say hello"
  echo 0 > /logs/verifier/reward.txt
fi
