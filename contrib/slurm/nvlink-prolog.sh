#!/bin/bash
# pytest-nvlink's quick check of this node for a Slurm Prolog, HealthCheckProgram or NHC:
# inventory, NVLink state, paths, P2P status and fabric, no measurement (--nvlink-quick).
#
#   nvlink-prolog.sh           exit 0 healthy, 1 not; each failure logged (stderr, syslog tag pytest-nvlink)
#   nvlink-prolog.sh --drain   also drain this node with the first failure as the reason (for
#                              HealthCheckProgram, whose exit status Slurm ignores)
#
# Slurm runs prologs with an almost empty environment: set the defaults below for your site.
# A non-zero Prolog exit drains the node and requeues the job, so the check has a hard time limit;
# running past it counts as a failure. NVLINK_METRICS_DIR (node_exporter's --collector.textfile.directory)
# also gets the verdict as pytest-nvlink.prom, written whole and renamed into place.
set -uo pipefail

suite=${NVLINK_SUITE:-auto}
python=${NVLINK_PYTHON:-python3}
limit_s=${NVLINK_QUICK_TIMEOUT_S:-10}
read -ra extra <<<"${NVLINK_PYTEST_ARGS:-}"
if [ -n "${NVLINK_METRICS_DIR:-}" ]; then
    extra+=("--nvlink-metrics=${NVLINK_METRICS_DIR}/pytest-nvlink.prom")
fi
node=${SLURMD_NODENAME:-$(hostname -s)}
drain=0
case "${1:-}" in
"") ;;
--drain) drain=1 ;;
*)
    echo "usage: $0 [--drain]" >&2
    exit 2
    ;;
esac

log() {
    echo "pytest-nvlink: $node: $1" >&2
    if command -v logger >/dev/null 2>&1; then
        logger -t pytest-nvlink -p daemon.err -- "$node: $1" 2>/dev/null || true
    fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
output=$(timeout -k 2 "$limit_s" "$python" -m pytest -p no:cacheprovider -q --nvlink-quick \
    --nvlink-suite="$suite" --nvlink-host="$node" "${extra[@]}" 2>&1)
status=$?
[ "$status" -eq 0 ] && exit 0

if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    first="quick check did not finish within ${limit_s} s"
    log "$first"
else
    first=""
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        [ -n "$first" ] || first=$line
        log "$line"
    done <<<"$output"
    [ -n "$first" ] || first="quick check failed with exit status $status and printed nothing"
    [ -n "$output" ] || log "$first"
fi
if [ "$drain" -eq 1 ]; then
    scontrol update NodeName="$node" State=DRAIN Reason="pytest-nvlink: ${first:0:200}" ||
        log "could not drain the node (scontrol update NodeName=$node State=DRAIN)"
fi
exit 1
