# shellcheck shell=bash
# Shared by the benchmarks (sourced after tests/lib/disk.sh, with DK_DEV mapped and SECS set).

# job NAME FIO-ARGS: one time-based read job; prints "NAME iops=.. kib_s=.. clat_us=.."
job() {
  local name=$1 out=$TB_DIR/bench-$1.json; shift
  on compute "fio --name=$name --filename=/dev/$DK_DEV --ioengine=libaio --direct=1 --allow_file_create=0 --size=32M \
    --time_based --runtime=$SECS --output-format=json --output=$out $*" >/dev/null || return 1
  python3 - "$out" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(f'{sys.argv[2]} iops={j["iops"]:.1f} kib_s={j["bw"]} clat_us={j["clat_ns"]["mean"] / 1000:.0f}')
PY
}
