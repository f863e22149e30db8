#!/usr/bin/env python3
"""One rank of a Python merge under mpirun (tests/python/mpi_ranks.sh): each process calls
vmerge.merge() as the command's ranks run, and writes what its call returned and saw to
REPORT.rank<R> (one file per rank: lines printed by several ranks interleave):
"rank R: ranks N, wrote D of T bytes, document keys K"."""
import os
import sys

import vmerge

checkpoint, target, report = sys.argv[1], sys.argv[2], sys.argv[3]
seen = []
log = vmerge.merge(checkpoint, target, progress=lambda done, total: seen.append((done, total)), max_shard_size="400KB")
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))
done, total = seen[-1] if seen else (0, 0)
with open("%s.rank%s" % (report, rank), "w") as out:
    out.write("rank %s: ranks %s, wrote %d of %d bytes, document keys %d\n" % (rank, log.get("ranks"), done, total, len(log)))
