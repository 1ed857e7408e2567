#!/bin/bash
# The 23 public traces of the simulator's suite (docs/simulator.rst, *Results on real traces: the suite*), as
# CSV timestamp,object_id,size_bytes, from git copies of the four repositories that keep them:
#
#     bench/traces/build.sh SOURCES OUT
#
# SOURCES holds one git directory per repository, named owner+name (a clone, or a bare copy as OWNER+NAME/repo):
# 1a1a11a+libCacheSim, moka-rs+cache-trace, cache2k+cache2k-benchmark, ben-manes+caffeine.  OUT gets the CSVs
# (and raw/, the files as the repositories keep them).  zstd, xz, bzip2 and gzip are needed.  Then
# `htda simulate --suite OUT` or `python bench/adaptive_judge.py OUT`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/convert.sh"
[ $# -eq 2 ] || { echo "usage: $0 SOURCES OUT" >&2; exit 2; }
M=$(cd "$1" && pwd); mkdir -p "$2"; OUT=$(cd "$2" && pwd); RAW=$OUT/raw
mkdir -p "$RAW"; cd "$RAW"
get() { # repo path outname
  local dir="$M/$1"; [ -d "$dir/repo" ] && dir="$dir/repo"
  git -C "$dir" show "HEAD:$2" > "$3"
  if head -c 200 "$3" | grep -q 'git-lfs.github.com/spec'; then echo "LFS POINTER: $1:$2" >&2; return 1; fi
}
# binary big-endian ids -> CSV; $1 = struct code (i or q)
bin2csv() { python3 -c '
import struct, sys
c = sys.argv[1]; w = 4 if c == "i" else 8
data = sys.stdin.buffer.read(); n = len(data) // w
out = sys.stdout; out.write("timestamp,object_id,size_bytes\n")
out.write("".join(f"{i},{x},1\n" for i, x in enumerate(struct.unpack(f">{n}{c}", data[:n*w]), 1)))
' "$1"; }

# 1. libCacheSim cloudphysics
get 1a1a11a+libCacheSim data/cloudPhysicsIO.csv cloudPhysicsIO.csv
awk -F, 'NR==1{print "timestamp,object_id,size_bytes";next}{print $2","$5","$4}' cloudPhysicsIO.csv > $OUT/cloudphysics.csv

# 2. moka-rs ARC traces
for t in OLTP P2 P3 P6 P12; do
  get moka-rs+cache-trace arc/$t.lis.zst $t.lis.zst
  lc=$(echo $t | tr A-Z a-z)
  if [ $t = OLTP ]; then
    zstd -dc $t.lis.zst | awk -v h=$HDR 'BEGIN{print h}{print NR","$1","$2*512}' > $OUT/$lc.csv
  else
    zstd -dc $t.lis.zst | awk -v h=$HDR 'BEGIN{print h}{print $4","$1","$2*512}' > $OUT/$lc.csv
  fi
done

# 3. cache2k traces (big-endian 32-bit ids)
C2=org/cache2k/benchmark/traces; C2P=traces/src/main/resources/$C2
for p in ormbusy:trace-mt-db-20160419-busy.trc.bin.bz2 ormnight:trace-mt-db-20160419-night.trc.bin.bz2 \
         web07:trace-mt-20130703.trc.bin.gz web12:trace-mt-20121220.trc.bin.gz \
         glimpse:trace-glimpse.trc.bin.gz multi2:trace-multi2.trc.bin.gz cpp:trace-cpp.trc.bin.gz sprite:trace-sprite.trc.bin.gz; do
  n=${p%%:*}; f=${p#*:}
  get cache2k+cache2k-benchmark $C2P/$f $f
  case $f in *.bz2) bzip2 -dc $f ;; *.gz) gzip -dc $f ;; esac | bin2csv i > $OUT/$n.csv
done

# 4. caffeine simulator traces
CP=simulator/src/main/resources/com/github/benmanes/caffeine/cache/simulator/parser
CF=ben-manes+caffeine
get $CF $CP/adapt_size/request.trace.xz adaptsize.request.trace.xz
xz -dc adaptsize.request.trace.xz | awk -v h=$HDR 'BEGIN{print h}{print $1","$2","$3}' > $OUT/adaptsize.csv
get $CF $CP/corda/trace_vaultservice.gz corda.trace_vaultservice.gz
gzip -dc corda.trace_vaultservice.gz | bin2csv q > $OUT/corda.csv
get $CF $CP/scarab/scarab-recs.trace.xz scarab-recs.trace.xz
xz -dc scarab-recs.trace.xz | bin2csv q > $OUT/scarab.csv
get $CF $CP/cloud_physics/w106.trace.xz w106.trace.xz
xz -dc w106.trace.xz | bin2csv i > $OUT/w106.csv
for t in 2_pools cs multi1 multi3 ps; do
  get $CF $CP/lirs/$t.trace.gz lirs_$t.trace.gz
  gzip -dc lirs_$t.trace.gz | lirs2csv > $OUT/lirs_$t.csv
done
echo done
