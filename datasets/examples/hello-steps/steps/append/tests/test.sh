#!/bin/bash
# Step "append", in a verifier container of its own: the /app copied out of the agent's
# container holds notes.txt with the lines hello and world.
mkdir -p /logs/verifier
if [ "$(printf 'hello\nworld')" = "$(cat /app/notes.txt 2>/dev/null)" ]; then
  echo "PASSED: /app/notes.txt says hello, then world"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAILED: /app/notes.txt does not hold the lines hello and world"
  echo 0 > /logs/verifier/reward.txt
fi
