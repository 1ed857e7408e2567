#!/bin/bash
# Nine public traces kept out of the suite, to check that what the suite shows carries over to traces no rule was
# judged on (docs/simulator.rst, *Traces held out*), as CSV timestamp,object_id,size_bytes (request order as time,
# every object of size 1: none of them has times or sizes):
#
#     bench/traces/held_out.sh SOURCES OUT
#
# SOURCES as for build.sh (only ben-manes+caffeine is read).  From Caffeine's simulator: the four LIRS traces the
# suite does not hold (loop, zigzag, scan, backf: Jiang and Zhang, SIGMETRICS'02) and five SPEC CPU2000 memory
# address traces (gcc, gzip, mcf, swim, twolf; an object is an address, as Caffeine's AddressTraceReader reads it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/convert.sh"
[ $# -eq 2 ] || { echo "usage: $0 SOURCES OUT" >&2; exit 2; }
M=$(cd "$1" && pwd); mkdir -p "$2/raw"; OUT=$(cd "$2" && pwd); RAW=$OUT/raw
DIR=$M/ben-manes+caffeine; [ -d "$DIR/repo" ] && DIR=$DIR/repo
CP=simulator/src/main/resources/com/github/benmanes/caffeine/cache/simulator/parser
for t in loop zigzag scan backf; do
  git -C "$DIR" show "HEAD:$CP/lirs/$t.trace.gz" > "$RAW/lirs_$t.trace.gz"
  gzip -dc "$RAW/lirs_$t.trace.gz" | lirs2csv > "$OUT/lirs_$t.csv"
done
for t in gcc gzip mcf swim twolf; do
  git -C "$DIR" show "HEAD:$CP/address/$t.trace.gz" > "$RAW/address_$t.trace.gz"
  gzip -dc "$RAW/address_$t.trace.gz" | awk -v h=$HDR 'BEGIN{print h} NF>=2{n++; print n","$2",1"}' > "$OUT/address_$t.csv"
done
echo done
