# What build.sh and held_out.sh share (sourced by both): the CSV header they write, and the LIRS traces' conversion.
HDR="timestamp,object_id,size_bytes"
# a LIRS trace (a block number a line, '*' lines between its parts) -> CSV, request order as time, every block of size 1
lirs2csv() { awk -v h=$HDR 'BEGIN{print h} {gsub(/\r/,"")} $0=="*"{next} NF{n++; print n","$1",1"}'; }
