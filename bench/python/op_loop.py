"""N recorded `c = c + 1.0` at a script's top level and nothing else, for callgrind: the
instruction counts of two N differ by the cost of N - M ops.

    valgrind --tool=callgrind python bench/python/op_loop.py 21000   # and again with 1000
"""
import sys

import lazytrace as lt

n = int(sys.argv[1])
c = lt.zeros(4)
for i in range(n):
    c = c + 1.0
