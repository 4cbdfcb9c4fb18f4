#!/usr/bin/env python3
print(283104)
