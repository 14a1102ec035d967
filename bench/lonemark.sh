#!/usr/bin/env bash
# The server time of prelude.lua's lock-key read (issue 38, round 5): a
# script of prelude.lua and three reads of keys that hold the reader's own
# token, by GET alone, by holds (the releases' read), and three loneMark
# tests of a token that is not a lone holder's, each run 100,000 times by
# 16 connections of redis-benchmark; the figure is Redis' usec_per_call of
# EVALSHA (INFO commandstats). REV is the commit whose prelude.lua runs
# (the working tree's by default). Run on a quiet machine:
#
#   bash bench/lonemark.sh              # this tree's prelude.lua
#   REV=197ed93 bash bench/lonemark.sh  # before the fix
set -euo pipefail
cd "$(dirname "$0")/.."
prelude() { if [ -n "${REV:-}" ]; then git show "$REV:lua/prelude.lua"; else cat lua/prelude.lua; fi; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >/dev/null
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
token=AB.ABCDEFGHIJKLMNOPQRSTUVWXYZ # a tag, '.', 26 base32 digits: an exclusive holder's
for k in a b c; do redis-cli -p "$port" set "{x}$k" "$token" >/dev/null; done
run() {
  local sha
  sha=$(redis-cli -p "$port" script load "$(prelude; echo "$2")")
  redis-cli -p "$port" config resetstat >/dev/null
  redis-benchmark -p "$port" -n 100000 -c 16 -q evalsha "$sha" 3 '{x}a' '{x}b' '{x}c' "$token" >/dev/null
  echo "$1: $(redis-cli -p "$port" info commandstats | grep '^cmdstat_evalsha:' | grep -o 'usec_per_call=[0-9.]*')"
}
echo "prelude.lua of ${REV:-the working tree}"
run "3 GET     " "for i = 1, 3 do redis.call('GET', KEYS[i]) end return 1"
run "3 holds   " "for i = 1, 3 do holds(KEYS[i], ARGV[1]) end return 1"
run "3 loneMark" "for i = 1, 3 do loneMark(ARGV[1]) end return 1"
