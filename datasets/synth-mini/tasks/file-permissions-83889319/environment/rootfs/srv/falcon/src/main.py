#!/usr/bin/env python3
print(349418)
