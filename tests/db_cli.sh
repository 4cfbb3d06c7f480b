#!/bin/sh
# db_cli.sh CASE ATTNTUNE WORKDIR: `attntune show`, `export`, `import` and `merge` end to end (one CTest entry each).
set -u
case_=$1 T=$2 W=$3
rm -rf "$W"
mkdir -p "$W"
out=$W/out.txt
: >"$out"
fail() { echo "FAIL ($case_): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
rows() { sqlite3 "$1" "SELECT COUNT(*) FROM measurements" 2>/dev/null || echo -1; }
unset ATTN_DB

# A hand-written export: two devices, a run, rows with every kind of field (nulls, a multi-line log with quotes and
# non-ASCII text, a lowrank row with an error, a failed row, model and measured rows, causal and n_kv != n).
S1='flash cpu f32 d=64 br=64 bc=64 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=0 rank=0 seed=0'
S2='flash cpu f32 d=64 br=32 bc=64 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=0 rank=0 seed=0'
S3='lowrank cpu f32 d=64 br=64 bc=64 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=2 rank=2145 seed=0'
S4='flash cpu f32 d=64 br=64 bc=64 causal=1 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=0 rank=0 seed=0'
S5='flash cuda f16 d=128 br=128 bc=64 causal=0 unroll=0 warps=8 stages=2 arch=sm_90 tile=0 feature=taylor degree=0 rank=0 seed=0'
meas() { # device spec hash-suffix run n n_kv d dtype causal time gflops reads writes error status log provenance created
  printf '  {"device": "%s", "spec": "%s", "source_hash": "h%s", "run": %s, "n": %s, "n_kv": %s, "d": %s, "dtype": "%s", "causal": %s, "batch": 2, "heads": 4, "heads_kv": 2, "time_ms": %s, "gflops": %s, "reads": %s, "writes": %s, "error": %s, "status": "%s", "log": "%s", "provenance": "%s", "created": "%s"}' "$@"
}
fixture() {
  {
    echo '{"attntune_export": 1, "schema_version": 2,'
    echo ' "devices": [{"name": "cpu:Test CPU @ 2GHz", "kind": "cpu", "arch": null, "info": "{\"kind\": \"cpu\", \"threads\": 2}"},'
    echo '              {"name": "H100", "kind": "cuda", "arch": "sm_90", "info": null}],'
    echo ' "runs": [{"id": 1, "device": "cpu:Test CPU @ 2GHz", "started": "2026-01-01T10:00:00.000Z", "ended": null, "command": "attntune --gpu cpu --d 64", "status": "interrupted"}],'
    echo ' "measurements": ['
    meas "cpu:Test CPU @ 2GHz" "$S1" 1 1 1024 1024 64 f32 0 1.5 2.5 1000 10 1.2e-07 ok "" measured 2026-01-01T10:00:01.000Z; echo ,
    meas "cpu:Test CPU @ 2GHz" "$S2" 2 1 1024 1024 64 f32 0 1.25 3.25 null null 2.5e-07 ok "" measured 2026-01-01T10:00:02.000Z; echo ,
    meas "cpu:Test CPU @ 2GHz" "$S3" 3 1 1024 1024 64 f32 0 0.5 9.0 77 7 0.0031 ok "approx" measured 2026-01-01T10:00:03.000Z; echo ,
    meas "cpu:Test CPU @ 2GHz" "$S2" 4 null 4096 4096 64 f32 0 20.0 30.0 null null null compile_error 'cc: error: \"x\" line 1\nline 2 \u00e9' measured 2026-01-01T10:00:04.000Z; echo ,
    meas "cpu:Test CPU @ 2GHz" "$S4" 5 1 100 300 64 f32 1 0.125 1.0 5 6 1e-07 ok "" measured 2026-01-01T10:00:05.000Z; echo ,
    meas "H100" "$S5" 6 null 2048 2048 128 f16 0 0.0625 1000.5 123456789012 42 null ok "" model 2026-01-01T10:00:06.000Z
    echo ' ]}'
  } >"$1"
}

# keep_better: one kernel per scenario (by its Br), every row on one problem; the schema-4 fields written out.
kspec() { echo "flash cpu f32 d=64 br=$1 bc=64 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=0 rank=0 seed=0"; }
krow() { # br status time final created [threads]
  printf '  {"device": "cpu:Keep CPU", "spec": "%s", "source_hash": null, "run": null, "n": 512, "n_kv": 512, "d": 64, "dtype": "f32", "causal": 0, "batch": 1, "heads": 8, "heads_kv": 8, "time_ms": %s, "gflops": null, "reads": null, "writes": null, "error": null, "status": "%s", "log": "", "provenance": "measured", "created": "%s", "threads": %s, "reps": 9, "iqr_ms": 0.01, "load": 0.5, "final": %s, "chosen": 0, "is_default": 0}' \
    "$(kspec "$1")" "$3" "$2" "$5" "${6:-4}" "$4"
}
kfile() { # FILE "br status time final created [threads]" ...: a hand-written export of those rows
  f=$1
  shift
  {
    echo '{"attntune_export": 1, "devices": [{"name": "cpu:Keep CPU", "kind": "cpu", "arch": null, "info": null}],'
    echo ' "measurements": ['
    sep=
    for r in "$@"; do
      printf '%s' "$sep"
      krow $r
      sep=',
'
    done
    printf '\n ]}\n'
  } >"$f"
}
kq() { # DB BR [THREADS]: "status time final" of that scenario's row
  sqlite3 "$1" "SELECT m.status || ' ' || m.time_ms || ' ' || m.final FROM measurements m JOIN kernels k ON k.id = m.kernel_id
                WHERE k.spec LIKE '% br=$2 %' AND m.threads = ${3:-4}" 2>&1
}
kstate() { # DB: every row, for comparing two databases
  sqlite3 "$1" "SELECT k.spec, m.threads, m.status, m.time_ms, m.final, m.created FROM measurements m
                JOIN kernels k ON k.id = m.kernel_id ORDER BY k.spec, m.threads" 2>&1
}

case $case_ in
roundtrip)  # export -> import into a fresh db -> export: identical; importing again changes nothing
  fixture "$W/in.json"
  "$T" import "$W/in.json" --db "$W/a.db" >"$out" 2>&1 || fail "import exit $?"
  grep -q "6 measurements (6 new, 0 replaced, 0 kept)" "$out" || fail "import report"
  [ "$(rows "$W/a.db")" -eq 6 ] || fail "rows $(rows "$W/a.db")"
  "$T" export "$W/e1.json" --db "$W/a.db" >"$out" 2>&1 || fail "export exit $?"
  # a device's info is the JSON object it describes, not a string holding JSON (the fixture's older form)
  grep -A 2 '"info": {' "$W/e1.json" | grep -q '"threads": 2' || fail "device info is not exported as an object"
  grep -q '"info": "' "$W/e1.json" && fail "device info exported as a string"
  "$T" import "$W/e1.json" --db "$W/b.db" >"$out" 2>&1 || fail "import 2 exit $?"
  ATTN_DB="$W/b.db" "$T" export "$W/e2.json" >"$out" 2>&1 || fail "export 2 exit $?"
  cmp "$W/e1.json" "$W/e2.json" >"$out" 2>&1 || fail "round trip differs"
  "$T" import "$W/e1.json" --db "$W/b.db" >"$out" 2>&1 || fail "re-import exit $?"
  grep -q "(0 new, 0 replaced, 6 kept)" "$out" || fail "re-import report (the same rows are kept, not rewritten)"
  [ "$(sqlite3 "$W/b.db" "SELECT COUNT(*) FROM runs")" -eq 1 ] || fail "a re-import duplicated the run"
  "$T" export - --db "$W/b.db" >"$W/e3.json" 2>"$out" || fail "export - exit $?"
  cmp "$W/e1.json" "$W/e3.json" >"$out" 2>&1 || fail "re-import changed the rows"
  # every field of the fixture came through: spot-check the awkward ones in the database itself
  [ "$(sqlite3 "$W/b.db" "SELECT count(*) FROM measurements WHERE reads = 123456789012 AND error IS NULL AND provenance = 'model' AND gflops = 1000.5")" -eq 1 ] || fail "model row"
  [ "$(sqlite3 "$W/b.db" "SELECT count(*) FROM measurements WHERE run_id IS NULL AND status = 'compile_error' AND log LIKE 'cc: error: \"x\" line 1' || char(10) || 'line 2 %'")" -eq 1 ] || fail "log text"
  [ "$(sqlite3 "$W/b.db" "SELECT count(*) FROM measurements WHERE n = 100 AND n_kv = 300 AND causal = 1 AND heads_kv = 2 AND created = '2026-01-01T10:00:05.000Z'")" -eq 1 ] || fail "causal row"
  [ "$(sqlite3 "$W/b.db" "SELECT kind || ' ' || ifnull(arch, '-') FROM devices WHERE name = 'H100'")" = "cuda sm_90" ] || fail "device"
  [ "$(sqlite3 "$W/b.db" "SELECT source_hash FROM kernels WHERE spec LIKE 'lowrank%'")" = "h3" ] || fail "source hash"
  # and a real tuner run (performance model: no compiler needed) round-trips too
  "$T" --gpu A100 --d 64 --n 256,1024 --db "$W/t.db" >"$out" 2>&1 || fail "tune exit $?"
  "$T" export "$W/t1.json" --db "$W/t.db" >"$out" 2>&1 || fail "export t"
  "$T" import "$W/t1.json" --db "$W/t2.db" >"$out" 2>&1 || fail "import t"
  "$T" export "$W/t2.json" --db "$W/t2.db" >"$out" 2>&1 || fail "export t2"
  cmp "$W/t1.json" "$W/t2.json" >"$out" 2>&1 || fail "tuner round trip differs"
  [ "$(rows "$W/t.db")" -eq "$(rows "$W/t2.db")" ] && [ "$(rows "$W/t.db")" -gt 4 ] || fail "tuner rows"
  ;;
import_bad)  # bad files: a clear reason, exit 1, and nothing imported
  fixture "$W/in.json"
  "$T" import "$W/in.json" --db "$W/a.db" >"$out" 2>&1 || fail "import exit $?"
  printf '{"attntune_export": 1, "devices": [], "measurements": [\n' >"$W/trunc.json"
  "$T" import "$W/trunc.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "trunc.json:2:" "$out" || fail "truncated JSON"
  echo '{"devices": [], "measurements": []}' >"$W/other.json"
  "$T" import "$W/other.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'not an attntune export' "$out" || fail "not an export"
  # a valid first row, then a row with an unknown field: the first is not kept either
  sed 's/"status": "ok", "log": "", "provenance": "model"/"status": "ok", "colour": "red", "log": "", "provenance": "model"/' \
    "$W/in.json" | sed 's/"n": 1024, "n_kv": 1024, "d": 64, "dtype": "f32", "causal": 0, "batch": 2, "heads": 4, "heads_kv": 2, "time_ms": 1.5/"n": 555, "n_kv": 555, "d": 64, "dtype": "f32", "causal": 0, "batch": 2, "heads": 4, "heads_kv": 2, "time_ms": 1.5/' >"$W/unknown.json"
  "$T" import "$W/unknown.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'measurements\[5\]: "colour" is not a known field (nothing imported)' "$out" || fail "unknown field"
  [ "$(sqlite3 "$W/a.db" "SELECT count(*) FROM measurements WHERE n = 555")" -eq 0 ] || fail "partial import kept"
  sed 's/"status": "compile_error"/"status": "great"/' "$W/in.json" >"$W/status.json"
  "$T" import "$W/status.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'measurements\[3\]: "status" must be ok, wrong,' "$out" || fail "bad status"
  sed 's/"info": null}/"info": 7}/' "$W/in.json" >"$W/info.json"
  "$T" import "$W/info.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'devices\[1\]: "info" must be an object, a string or null' "$out" || fail "bad info"
  sed 's/"n": 100,/"n": "100",/' "$W/in.json" >"$W/type.json"
  "$T" import "$W/type.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'measurements\[4\]: "n" must be an integer' "$out" || fail "bad type"
  [ "$(rows "$W/a.db")" -eq 6 ] || fail "rows changed: $(rows "$W/a.db")"
  "$T" import "$W/missing.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "missing.json" "$out" || fail "missing file"
  "$T" import >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "no file given" "$out" || fail "no file"
  "$T" export "$W/x.json" --bogus >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "unknown option '--bogus'" "$out" || fail "bad option"
  "$T" export "$W/x.json" --db "$W/none.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "no such database" "$out" && [ ! -e "$W/none.db" ] && [ ! -e "$W/x.json" ] || fail "export of no db"
  ;;
show)  # the best row per (device, d, d_v, n, dtype, causal): exact before lowrank, ok only; table and JSON
  fixture "$W/in.json"
  "$T" import "$W/in.json" --db "$W/a.db" >"$out" 2>&1 || fail "import exit $?"
  "$T" show --db "$W/a.db" >"$out" 2>&1 || fail "show exit $?"
  [ "$(grep -c '^cpu:Test CPU @ 2GHz' "$out")" -eq 2 ] || fail "cpu rows"
  grep -q "^cpu:Test CPU @ 2GHz  *64  *64  *1024  *1024  *8  *- f32  *0  flash d=64 Br=32 Bc=64 cpu f32 .* 1.2500  *3.2 GFLOP/s  *2.50e-07  measured" "$out" \
    || fail "best at 1024 is the faster exact row"
  # a GPU row's rate in TFLOP/s (1000.5 GFLOP/s)
  grep -q "^H100  *128  *128  *2048  *2048  *8  *- f16 .* 0.0625  *1.0 TFLOP/s  *-  model" "$out" || fail "model row"
  grep -q "lowrank" "$out" && fail "an approximate row shown over exact ones"
  [ "$(wc -l <"$out")" -eq 4 ] || fail "header + 3 rows"
  "$T" show --db "$W/a.db" --json >"$out" 2>&1 || fail "show --json exit $?"
  [ "$(grep -c '"device":' "$out")" -eq 3 ] && grep -q '"summary": "flash d=64 Br=32 Bc=64 cpu f32"' "$out" &&
    grep -q '"error": null' "$out" && grep -q '"provenance": "model"' "$out" && grep -q '"d_v": 64' "$out" ||
    fail "json fields"
  ATTN_DB="$W/a.db" "$T" show >"$out" 2>&1 && grep -q H100 "$out" || fail "\$ATTN_DB"
  "$T" show --db "$W/none.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "no such database: $W/none.db" "$out" && [ ! -e "$W/none.db" ] || fail "missing db"
  echo "plain text, not a database at all ........................................................" >"$W/text.db"
  "$T" show --db "$W/text.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "file is not a database" "$out" || fail "not a database"
  "$T" show --bogus >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "unknown option" "$out" || fail "bad option"
  "$T" show --db >"$out" 2>&1
  [ $? -eq 2 ] || fail "--db without a path"
  sqlite3 "$W/empty.db" "PRAGMA user_version = 0; CREATE TABLE t(x);" || fail "sqlite3"
  "$T" show --db "$W/empty.db" >"$out" 2>&1 && grep -q "no tuned rows" "$out" || fail "empty db"
  ;;
merge)  # B into A: new rows added, overlapping rows keep the better/newer, the same file changes nothing
  fixture "$W/in.json"
  "$T" import "$W/in.json" --db "$W/a.db" >"$out" 2>&1 || fail "import a"
  "$T" import "$W/in.json" --db "$W/b.db" >"$out" 2>&1 || fail "import b"
  # B: one row re-measured later and faster (replaces), one slower and older than A's (kept), one failed in B but ok
  # in A (kept); the rule itself has its own case, keep_better
  sqlite3 "$W/b.db" "UPDATE measurements SET time_ms = 0.75, created = '2026-02-01T00:00:00.000Z' WHERE n = 1024 AND gflops = 2.5;
    UPDATE measurements SET time_ms = 8.5, created = '2025-01-01T00:00:00.000Z' WHERE n = 1024 AND gflops = 3.25;
    UPDATE measurements SET status = 'wrong', created = '2027-01-01T00:00:00.000Z' WHERE n = 100;" || fail "sqlite3"
  "$T" --gpu H100 --d 64 --n 512 --db "$W/b.db" >"$out" 2>&1 || fail "tune b"
  nb=$(rows "$W/b.db")
  "$T" merge "$W/a.db" "$W/b.db" >"$out" 2>&1 || fail "merge exit $?"
  added=$((nb - 6))
  grep -q "$added added, 1 replaced, 5 kept" "$out" || fail "counts (want $added added)"
  grep -q "1 runs added" "$out" || fail "runs"
  [ "$(rows "$W/a.db")" -eq $((6 + added)) ] || fail "rows $(rows "$W/a.db")"
  [ "$(sqlite3 "$W/a.db" "SELECT time_ms FROM measurements WHERE n = 1024 AND gflops = 2.5")" = "0.75" ] || fail "faster row"
  [ "$(sqlite3 "$W/a.db" "SELECT time_ms FROM measurements WHERE n = 1024 AND gflops = 3.25")" = "1.25" ] || fail "older row"
  [ "$(sqlite3 "$W/a.db" "SELECT status FROM measurements WHERE n = 100")" = "ok" ] || fail "ok over wrong"
  "$T" merge "$W/a.db" "$W/b.db" >"$out" 2>&1 || fail "merge again"
  grep -q "0 added, 0 replaced, $nb kept" "$out" && grep -q "0 runs added" "$out" || fail "second merge"
  n=$(rows "$W/a.db")
  "$T" merge "$W/a.db" "$W/a.db" >"$out" 2>&1 || fail "self merge exit"
  grep -q "0 added, 0 replaced, $n kept (the same database)" "$out" && [ "$(rows "$W/a.db")" -eq "$n" ] || fail "self merge"
  "$T" merge "$W/a.db" >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "needs two databases or more" "$out" || fail "one argument"
  # a target that does not exist is created, with the sources' rows
  "$T" merge "$W/new.db" "$W/a.db" "$W/b.db" >"$out" 2>&1 || fail "merge into a new target: exit $?"
  [ "$(rows "$W/new.db")" -eq "$n" ] || fail "new target rows $(rows "$W/new.db"), want $n"
  # and a merge that fails leaves no target behind
  "$T" merge "$W/new2.db" "$W/a.db" "$W/none.db" >"$out" 2>&1
  [ $? -eq 1 ] && [ ! -e "$W/new2.db" ] || fail "a failed merge left its new target"
  "$T" merge "$W/a.db" "$W/none.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "no such database" "$out" || fail "missing B"
  echo "not a database ..................................................................................." >"$W/text.db"
  "$T" merge "$W/a.db" "$W/text.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "file is not a database" "$out" && [ "$(rows "$W/a.db")" -eq "$n" ] || fail "text B"
  ;;
keep_better)  # merge and import keep the better row of a key by the tuner's rule (attn_db_meas_better)
  OLD=2026-01-01T00:00:00.000Z NEW=2026-03-01T00:00:00.000Z
  # target T and source S, per kernel: what each has and (comment) which must win
  kfile "$W/t.json" "16 ok 2.0 0 $OLD" \
                    "24 error 1.0 0 $NEW" \
                    "32 ok 1.0 0 $OLD" \
                    "40 ok 2.0 0 $NEW" \
                    "48 ok 2.0 1 $OLD" \
                    "56 wrong 0.5 0 $OLD"
  kfile "$W/s.json" "16 error 1.0 0 $NEW" \
                    "24 ok 3.0 0 $OLD" \
                    "32 ok 1.5 0 $NEW" \
                    "40 ok 1.5 0 $OLD" \
                    "48 ok 1.0 0 $NEW" \
                    "56 launch_error 0.5 0 $NEW" \
                    "32 ok 0.5 0 $NEW 8"
  for x in t s t2 s2 t3 t4; do
    j=${x%2}; j=${j%3}; j=${j%4}
    "$T" import "$W/$j.json" --db "$W/$x.db" >"$out" 2>&1 || fail "import $j.json into $x.db: exit $?"
  done
  [ "$(rows "$W/t.db")" -eq 6 ] && [ "$(rows "$W/s.db")" -eq 7 ] || fail "fixture rows"
  "$T" merge "$W/t.db" "$W/s.db" >"$out" 2>&1 || fail "merge exit $?"
  grep -q "s.db into .*t.db: 1 added, 2 replaced, 4 kept" "$out" || fail "merge counts"
  [ "$(kq "$W/t.db" 16)" = "ok 2.0 0" ] || fail "ok replaced by a newer failed row: $(kq "$W/t.db" 16)"
  [ "$(kq "$W/t.db" 24)" = "ok 3.0 0" ] || fail "failed row not replaced by an (older) ok row: $(kq "$W/t.db" 24)"
  [ "$(kq "$W/t.db" 32)" = "ok 1.0 0" ] || fail "faster row replaced by a newer slower one: $(kq "$W/t.db" 32)"
  [ "$(kq "$W/t.db" 40)" = "ok 1.5 0" ] || fail "slower row not replaced by an (older) faster one: $(kq "$W/t.db" 40)"
  [ "$(kq "$W/t.db" 48)" = "ok 2.0 1" ] || fail "finalist time replaced by a faster screening time: $(kq "$W/t.db" 48)"
  [ "$(kq "$W/t.db" 56)" = "wrong 0.5 0" ] || fail "kernel's own failure replaced by an environmental one: $(kq "$W/t.db" 56)"
  [ "$(kq "$W/t.db" 32 8)" = "ok 0.5 0" ] || fail "threads are part of the key: $(kq "$W/t.db" 32 8)"
  # the other way round the same rows win: the rule does not depend on which side is the target
  "$T" merge "$W/s2.db" "$W/t2.db" >"$out" 2>&1 || fail "reverse merge exit $?"
  grep -q "0 added, 4 replaced, 2 kept" "$out" || fail "reverse merge counts"
  [ "$(kstate "$W/s2.db")" = "$(kstate "$W/t.db")" ] || fail "reverse merge differs: $(kstate "$W/s2.db")"
  # import applies the same rule
  "$T" import "$W/s.json" --db "$W/t2.db" >"$out" 2>&1 || fail "import exit $?"
  grep -q "(1 new, 2 replaced, 4 kept)" "$out" || fail "import counts"
  [ "$(kq "$W/t2.db" 16)" = "ok 2.0 0" ] && [ "$(kq "$W/t2.db" 24)" = "ok 3.0 0" ] || fail "import: ok vs failed"
  [ "$(kq "$W/t2.db" 32)" = "ok 1.0 0" ] && [ "$(kq "$W/t2.db" 40)" = "ok 1.5 0" ] || fail "import: lower time"
  [ "$(kstate "$W/t2.db")" = "$(kstate "$W/t.db")" ] || fail "import and merge differ: $(kstate "$W/t2.db")"
  # two sources in one merge, in order: U's faster time for br=32 beats T's, then S's slower one is kept
  kfile "$W/u.json" "32 ok 0.9 0 $OLD" "64 ok 1.0 0 $OLD"
  "$T" import "$W/u.json" --db "$W/u.db" >"$out" 2>&1 || fail "import u"
  "$T" merge "$W/t3.db" "$W/u.db" "$W/s.db" >"$out" 2>&1 || fail "two-source merge exit $?"
  grep -q "u.db into .*t3.db: 1 added, 1 replaced, 0 kept" "$out" &&
    grep -q "s.db into .*t3.db: 1 added, 2 replaced, 4 kept" "$out" || fail "two-source counts"
  [ "$(kq "$W/t3.db" 32)" = "ok 0.9 0" ] && [ "$(kq "$W/t3.db" 64)" = "ok 1.0 0" ] &&
    [ "$(rows "$W/t3.db")" -eq 8 ] || fail "two-source rows"
  # one transaction for all sources: a bad second source leaves the target as it was
  echo "not a database ..................................................................................." >"$W/text.db"
  before=$(kstate "$W/t4.db")
  "$T" merge "$W/t4.db" "$W/s.db" "$W/text.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "file is not a database" "$out" || fail "bad second source"
  [ "$(kstate "$W/t4.db")" = "$before" ] || fail "a failed merge changed the target"
  "$T" merge "$W/t4.db" "$W/s.db" "$W/none.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "no such database" "$out" && [ "$(kstate "$W/t4.db")" = "$before" ] || fail "missing second source"
  # the schema-4 fields go out and come back
  "$T" export "$W/e1.json" --db "$W/t.db" >"$out" 2>&1 || fail "export exit $?"
  grep -q '"threads": 8,' "$W/e1.json" && grep -q '"reps": 9,' "$W/e1.json" && grep -q '"iqr_ms": 0.01' "$W/e1.json" &&
    grep -q '"load": 0.5,' "$W/e1.json" && grep -q '"final": 1,' "$W/e1.json" && grep -q '"is_default": 0' "$W/e1.json" ||
    fail "exported fields"
  "$T" import "$W/e1.json" --db "$W/r.db" >"$out" 2>&1 || fail "re-import exit $?"
  "$T" export "$W/e2.json" --db "$W/r.db" >"$out" 2>&1 || fail "re-export exit $?"
  cmp "$W/e1.json" "$W/e2.json" >"$out" 2>&1 || fail "schema-4 round trip differs"
  # an older file (no schema-4 fields) reads as not recorded
  fixture "$W/old.json"
  "$T" import "$W/old.json" --db "$W/o.db" >"$out" 2>&1 || fail "old import exit $?"
  [ "$(sqlite3 "$W/o.db" "SELECT count(*) FROM measurements WHERE threads = 0 AND reps IS NULL AND iqr_ms IS NULL
       AND load IS NULL AND final = 0 AND chosen = 0 AND is_default = 0")" -eq 6 ] || fail "old file defaults"
  "$T" export "$W/o.json" --db "$W/o.db" >"$out" 2>&1 && grep -q '"reps": null,' "$W/o.json" &&
    grep -q '"load": null,' "$W/o.json" || fail "not recorded exports as null"
  # and the new fields are type-checked like the others
  sed 's/"final": 1/"final": 2/' "$W/t.json" >"$W/bad1.json"
  "$T" import "$W/bad1.json" --db "$W/o.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'measurements\[4\]: "final" is out of range' "$out" || fail "final out of range"
  sed 's/"load": 0.5/"load": "high"/' "$W/t.json" >"$W/bad2.json"
  "$T" import "$W/bad2.json" --db "$W/o.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q 'measurements\[0\]: "load" must be a number or null' "$out" || fail "load type"
  sed 's/"iqr_ms": 0.01/"iqr_ms": -2/' "$W/t.json" >"$W/bad3.json"
  "$T" import "$W/bad3.json" --db "$W/o.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q '"iqr_ms" must be a number >= 0 or null' "$out" || fail "negative iqr"
  [ "$(rows "$W/o.db")" -eq 6 ] || fail "a bad file imported rows"
  ;;
locked)  # a database locked past the timeout: a one-line reason, exit 1, no rows lost
  fixture "$W/in.json"
  "$T" import "$W/in.json" --db "$W/a.db" >"$out" 2>&1 || fail "import"
  fixture "$W/in2.json"
  sed -i 's/"n": 1024, "n_kv": 1024/"n": 2000, "n_kv": 2000/' "$W/in2.json"
  # hold the write lock for 3 s from another process
  (printf 'BEGIN EXCLUSIVE;\nDELETE FROM runs WHERE id < 0;\n.shell sleep 3\nCOMMIT;\n' | sqlite3 "$W/a.db") &
  holder=$!
  sleep 0.5
  start=$(date +%s)
  ATTN_DB_TIMEOUT_MS=300 "$T" import "$W/in2.json" --db "$W/a.db" >"$out" 2>&1
  rc=$?
  end=$(date +%s)
  wait $holder
  [ $rc -eq 1 ] && grep -q "database is locked" "$out" && [ "$(wc -l <"$out")" -eq 1 ] || fail "locked import rc $rc"
  [ $((end - start)) -le 2 ] || fail "waited $((end - start)) s for a 300 ms timeout"
  [ "$(rows "$W/a.db")" -eq 6 ] || fail "rows $(rows "$W/a.db")"
  # after the lock is gone the same import succeeds
  "$T" import "$W/in2.json" --db "$W/a.db" >"$out" 2>&1 || fail "import after unlock"
  [ "$(rows "$W/a.db")" -eq 9 ] || fail "rows after $(rows "$W/a.db")"
  ;;
export_symlink)  # export writes a fresh temporary (O_EXCL, random name): a link planted at FILE.tmp, the old fixed
  # name, is neither followed nor replaced, and the export still lands in FILE
  fixture "$W/in.json"
  "$T" import "$W/in.json" --db "$W/a.db" >"$out" 2>&1 || fail "import exit $?"
  echo "victim: keep me" >"$W/victim"
  ln -s "$W/victim" "$W/e.json.tmp" || fail "ln"
  ln -s "$W/no-such-victim" "$W/e2.json.tmp" || fail "ln 2"
  umask 022
  "$T" export "$W/e.json" --db "$W/a.db" >"$out" 2>&1 || fail "export exit $?"
  [ "$(cat "$W/victim")" = "victim: keep me" ] || fail "the file behind the planted link was written"
  [ -L "$W/e.json.tmp" ] && [ "$(readlink "$W/e.json.tmp")" = "$W/victim" ] || fail "the planted link was replaced"
  [ -f "$W/e.json" ] && [ ! -L "$W/e.json" ] && grep -q '"attntune_export": 1' "$W/e.json" || fail "e.json has no export"
  [ "$(stat -c %a "$W/e.json")" = 644 ] || fail "mode $(stat -c %a "$W/e.json"), want 644 under umask 022"
  # a dangling planted link is not created through either
  "$T" export "$W/e2.json" --db "$W/a.db" >"$out" 2>&1 || fail "export 2 exit $?"
  [ ! -e "$W/no-such-victim" ] && [ -L "$W/e2.json.tmp" ] && cmp "$W/e.json" "$W/e2.json" >/dev/null 2>&1 ||
    fail "dangling link followed, or the exports differ"
  # over an existing export, and into a directory that does not exist (fails, nothing left behind)
  "$T" export "$W/e.json" --db "$W/a.db" >"$out" 2>&1 && cmp "$W/e.json" "$W/e2.json" >/dev/null 2>&1 || fail "re-export"
  "$T" export "$W/nodir/e.json" --db "$W/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "cannot create a temporary file beside $W/nodir/e.json" "$out" || fail "missing directory"
  left=$(ls -A "$W" | grep -v -x -e a.db -e 'a.db-.*' -e in.json -e victim -e e.json -e e2.json -e e.json.tmp \
         -e e2.json.tmp -e out.txt)
  [ -z "$left" ] || fail "left behind: $left"
  ;;
show_escape)  # names from elsewhere (import, merge) reach the terminal escaped: controls, C1 and invalid UTF-8 as \xNN
  {
    printf '%s\n' '{"attntune_export": 1, "devices": [{"name": "cpu:Evil\u001b[2J\u0007CPU", "kind": "cpu"},'
    printf '%s\n' '  {"name": "cpu:Raw CPU", "kind": "cpu"}, {"name": "cpu:Caf\u00e9 CPU", "kind": "cpu"}],'
    printf '%s\n' ' "measurements": ['
    meas 'cpu:Evil\u001b[2J\u0007CPU' "$S1" 1 null 1024 1024 64 f32 0 1.5 2.5 null null null ok "" measured 2026-01-01T10:00:01.000Z
    echo ,
    meas 'cpu:Raw CPU' "$S1" 1 null 1024 1024 64 f32 0 1.5 2.5 null null null ok "" measured 2026-01-01T10:00:01.000Z
    echo ,
    meas 'cpu:Caf\u00e9 CPU' "$S1" 1 null 1024 1024 64 f32 0 1.5 2.5 null null null ok "" measured 2026-01-01T10:00:01.000Z
    printf '%s\n' ' ]}'
  } >"$W/evil.json"
  "$T" import "$W/evil.json" --db "$W/a.db" >"$out" 2>&1 || fail "import exit $?"
  # bytes JSON cannot carry, as a merged database could: 0xff, U+009B (C1 CSI, valid UTF-8), a lead byte cut short
  sqlite3 "$W/a.db" "UPDATE devices SET name = CAST(X'6370753a526177ffc29bc320435055' AS TEXT) WHERE name = 'cpu:Raw CPU'" ||
    fail "sqlite3"
  "$T" show --db "$W/a.db" >"$out" 2>&1 || fail "show exit $?"
  grep -F -q 'cpu:Evil\x1b[2J\x07CPU ' "$out" || fail "ESC and BEL not shown as \\xNN"
  grep -F -q 'cpu:Raw\xff\xc2\x9b\xc3 CPU ' "$out" || fail "invalid UTF-8 and C1 not shown as \\xNN"
  grep -F -q "$(printf 'cpu:Caf\303\251 CPU ')" "$out" || fail "valid UTF-8 changed"
  # nothing but printable ASCII, newlines and the e-acute's two bytes
  raw=$(LC_ALL=C tr -d '\n -~\303\251' <"$out" | wc -c)
  [ "$raw" -eq 0 ] || fail "$raw raw control or non-UTF-8 bytes in the table"
  # columns line up on the escaped text (byte widths)
  [ "$(grep 'flash d=64' "$out" | LC_ALL=C awk '{ print index($0, " flash d=64") }' | sort -u | wc -l)" -eq 1 ] || fail "alignment"
  [ "$(grep -c 'flash d=64' "$out")" -eq 3 ] || fail "want 3 rows"
  ;;
readonly_user)  # a database this user cannot write (another user's 0644 file in a 0555 directory): show, export and
  # the runtime read it (WAL without -shm: immutable); writers refuse in one line; an older schema says how to migrate
  P=${4:?tuner_plan path}
  if [ "$(id -u)" -ne 0 ]; then
    OTHER=self
  elif setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    OTHER=setpriv
  elif su -s /bin/sh -c true -- nobody 2>/dev/null; then
    OTHER=su
  else
    echo "SKIP ($case_): running as root, and neither setpriv nor su can run a command as nobody"
    exit 0
  fi
  other() { # CMD...: as a user who cannot write what this script made
    case $OTHER in
    self) "$@" ;;
    setpriv) setpriv --reuid=nobody --regid=nogroup --clear-groups "$@" ;;
    su) su -s /bin/sh -c 'exec "$0" "$@"' -- nobody "$@" ;;
    esac
  }
  mkdir -p "$W/ro" "$W/cache-other"
  # the other user's own cache (a shared, world-writable one would not be trusted)
  if [ "$OTHER" = self ]; then chmod 0700 "$W/cache-other"; else chown nobody "$W/cache-other" || fail "chown"; fi
  export ATTN_CACHE_DIR="$W/cache"
  "$T" --gpu A100 --d 64..256 --db "$W/ro/a.db" >"$out" 2>&1 || fail "tune a"
  "$T" --gpu cpu --d 32 --n 128 --budget 1 --db "$W/ro/c.db" >"$out" 2>&1 || fail "tune c"
  sqlite3 "$W/ro/old.db" "PRAGMA user_version = 0; CREATE TABLE t(x);" || fail "sqlite3"
  [ "$(sqlite3 "$W/ro/a.db" "PRAGMA journal_mode")" = wal ] || fail "a.db is not WAL"
  rm -f "$W"/ro/*-wal "$W"/ro/*-shm # the sqlite3 reads above may leave them; nothing is open now
  chmod 0444 "$W"/ro/*.db
  chmod 0555 "$W/ro"
  other test -r "$W/ro/a.db" || { chmod 0755 "$W/ro"; echo "SKIP ($case_): the other user cannot reach $W"; exit 0; }
  if other sh -c ': >"$1/probe"' sh "$W/ro" 2>/dev/null; then
    chmod 0755 "$W/ro"
    echo "SKIP ($case_): the directory stays writable (chmod does not bind this user)"
    exit 0
  fi
  E="env ATTN_CACHE_DIR=$W/cache-other"
  other $E "$T" show --db "$W/ro/a.db" >"$out" 2>&1 || fail "show exit $?"
  grep -q "^A100  *64  *64  *1024 " "$out" || fail "show rows"
  other $E "$T" export - --db "$W/ro/a.db" >"$W/cache-other/e.json" 2>"$out" || fail "export exit $?"
  grep -q '"attntune_export": 1' "$W/cache-other/e.json" || fail "export content"
  # the runtime: the tuned row is found and used
  other $E "$P" "$W/ro/c.db" 32 128 2 >"$out" 2>&1 || fail "runtime on a read-only database: exit $?"
  grep -q "plan: flash d=32 .*(tuned" "$out" || fail "runtime did not use the tuned row"
  # writers refuse, in one line, and say why
  other $E "$T" --gpu A100 --d 64 --db "$W/ro/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && [ "$(grep -c "a.db: attempt to write a readonly database (a writer needs to write the file" "$out")" -eq 1 ] ||
    fail "tune on a read-only database"
  other $E "$T" import "$W/cache-other/e.json" --db "$W/ro/a.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "readonly database" "$out" || fail "import into a read-only database"
  [ -z "$(ls -A "$W/ro" | grep -v -x -e a.db -e c.db -e old.db)" ] || fail "files made beside: $(ls -A "$W/ro")"
  # an older schema: readers say how to migrate, the runtime serves defaults
  other $E "$T" show --db "$W/ro/old.db" >"$out" 2>&1
  [ $? -eq 1 ] && [ "$(wc -l <"$out")" -eq 1 ] &&
    grep -q "old.db: schema version 0 is older than this build's [0-9]*; open it once with a writer (attntune tune/import) to migrate" "$out" ||
    fail "show on an old read-only database"
  other $E "$T" export - --db "$W/ro/old.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "schema version 0 is older" "$out" || fail "export on an old read-only database"
  other $E "$P" "$W/ro/old.db" 32 128 2 >"$out" 2>&1
  [ $? -eq 3 ] && grep -q "plan: flash d=32 .*(default" "$out" || fail "runtime on an old read-only database: not the default"
  [ "$(sqlite3 "$W/ro/old.db" "PRAGMA user_version")" -eq 0 ] || fail "the old database was changed"
  # a writer has the database open meanwhile (-wal and -shm there, owned by it): readers still read
  chmod 0755 "$W/ro"
  chmod 0644 "$W/ro/a.db"
  (printf 'BEGIN;\nSELECT count(*) FROM runs;\n.shell sleep 2\nCOMMIT;\n' | sqlite3 "$W/ro/a.db" >/dev/null) &
  holder=$!
  sleep 0.5
  chmod 0555 "$W/ro"
  [ -e "$W/ro/a.db-shm" ] || fail "no -shm while a connection is open"
  other $E "$T" show --db "$W/ro/a.db" >"$out" 2>&1
  rc=$?
  wait $holder
  [ $rc -eq 0 ] && grep -q "^A100 " "$out" || fail "show beside an open writer: exit $rc"
  # the owner migrates the old database once; then readers read it
  chmod 0755 "$W/ro"
  chmod 0644 "$W/ro/old.db"
  echo '{"attntune_export": 1, "devices": [], "measurements": []}' >"$W/empty.json"
  "$T" import "$W/empty.json" --db "$W/ro/old.db" >"$out" 2>&1 || fail "owner's import exit $?"
  rm -f "$W"/ro/*-wal "$W"/ro/*-shm
  chmod 0555 "$W/ro"
  other $E "$T" show --db "$W/ro/old.db" >"$out" 2>&1 && grep -q "no tuned rows" "$out" || fail "show after migration"
  chmod 0755 "$W/ro"
  ;;
run_killed)  # SIGKILL during tuning: the run stays 'running' while its process lives, and the next writer marks it
  # 'interrupted' once the process is gone (its lock file, <db>.run-<id>.lock, is no longer held)
  export ATTN_CACHE_DIR="$W/cache"
  "$T" --gpu cpu --d 32 --n 96 --budget 6 --strategy exhaustive --db "$W/k.db" >"$W/run1.txt" 2>&1 &
  pid=$!
  i=0
  until [ -e "$W/k.db.run-1.lock" ] && [ "$(sqlite3 "$W/k.db" "SELECT status FROM runs WHERE id = 1" 2>/dev/null)" = running ]; do
    i=$((i + 1))
    [ $i -lt 600 ] || { kill $pid; fail "no running run after 60 s"; }
    sleep 0.1
  done
  # another writer meanwhile: the live run is left alone
  "$T" --gpu A100 --d 64 --db "$W/k.db" >"$out" 2>&1 || fail "model tune beside a live run: exit $?"
  [ "$(sqlite3 "$W/k.db" "SELECT status FROM runs WHERE id = 1")" = running ] || fail "a live run was marked"
  [ -e "$W/k.db.run-1.lock" ] || fail "a live run's lock file was removed"
  kill -KILL $pid
  wait $pid 2>/dev/null
  [ "$(sqlite3 "$W/k.db" "SELECT status FROM runs WHERE id = 1")" = running ] || fail "the killed run ended itself?"
  "$T" --gpu A100 --d 128 --db "$W/k.db" >"$out" 2>&1 || fail "model tune after the kill: exit $?"
  [ "$(sqlite3 "$W/k.db" "SELECT status || ' ' || ifnull(ended, '-') FROM runs WHERE id = 1")" = "interrupted -" ] ||
    fail "killed run: $(sqlite3 "$W/k.db" "SELECT status FROM runs WHERE id = 1")"
  [ "$(sqlite3 "$W/k.db" "SELECT group_concat(status) FROM runs WHERE id > 1 ORDER BY id")" = "done,done" ] ||
    fail "other runs: $(sqlite3 "$W/k.db" "SELECT group_concat(status) FROM runs WHERE id > 1")"
  [ -z "$(ls "$W" | grep '\.lock$')" ] || fail "lock files left: $(ls "$W" | grep '\.lock$')"
  # a run left 'running' by an older build (no lock file at all) is dead too
  sqlite3 "$W/k.db" "INSERT INTO runs(command) VALUES ('from an older build')" || fail "sqlite3"
  "$T" --gpu A100 --d 64 --db "$W/k.db" >"$out" 2>&1 || fail "model tune 3: exit $?"
  [ "$(sqlite3 "$W/k.db" "SELECT count(*) FROM runs WHERE status = 'running'")" -eq 0 ] || fail "a run without a lock file"
  ;;
damaged)  # a database that fails PRAGMA quick_check (one page overwritten, the header good): writers, import and merge
  # refuse it in one line naming the file and SQLite's first complaint; readers do not pay for the check
  "$T" --gpu A100 --d 64..256 --db "$W/x.db" >"$out" 2>&1 || fail "tune x"
  "$T" --gpu H100 --d 64 --db "$W/good.db" >"$out" 2>&1 || fail "tune good"
  ps=$(sqlite3 "$W/x.db" "PRAGMA page_size") pc=$(sqlite3 "$W/x.db" "PRAGMA page_count")
  rm -f "$W/x.db-wal" "$W/x.db-shm"
  # 16 bytes of 0xff in the middle of a page, from the middle of the file on, until quick_check objects while the
  # header and the schema still read and the rows still count (the damage a reader would not notice)
  pg=$((pc / 2)) found=
  while [ $pg -lt "$pc" ]; do
    rm -f "$W"/bad.db*
    cp "$W/x.db" "$W/bad.db"
    printf '\377\377\377\377\377\377\377\377\377\377\377\377\377\377\377\377' |
      dd of="$W/bad.db" bs=1 seek=$((pg * ps + ps / 2)) conv=notrunc 2>/dev/null || fail "dd"
    if [ "$(sqlite3 "$W/bad.db" "PRAGMA quick_check" 2>&1 | head -1)" != ok ] &&
       [ "$(sqlite3 "$W/bad.db" "PRAGMA user_version" 2>/dev/null)" = "$(sqlite3 "$W/x.db" "PRAGMA user_version")" ] &&
       sqlite3 "$W/bad.db" "SELECT count(*) FROM measurements" >/dev/null 2>&1; then
      found=$pg
      break
    fi
    pg=$((pg + 1))
  done
  [ -n "$found" ] || fail "no page of $pc whose damage quick_check sees"
  before=$(sqlite3 "$W/good.db" "SELECT count(*) FROM measurements")
  "$T" --gpu A100 --d 64 --db "$W/bad.db" >"$out" 2>&1
  [ $? -eq 1 ] && [ "$(grep -c "bad.db: damaged database (PRAGMA quick_check: .*)" "$out")" -eq 1 ] || fail "tune on it"
  "$T" export "$W/x.json" --db "$W/x.db" >"$out" 2>&1 || fail "export x"
  "$T" import "$W/x.json" --db "$W/bad.db" >"$out" 2>&1
  [ $? -eq 1 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "^attntune import: $W/bad.db: damaged database (PRAGMA quick_check: " "$out" ||
    fail "import into it"
  "$T" merge "$W/good.db" "$W/bad.db" >"$out" 2>&1
  [ $? -eq 1 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "^attntune merge: $W/bad.db: damaged database (PRAGMA quick_check: " "$out" ||
    fail "merge from it"
  [ "$(sqlite3 "$W/good.db" "SELECT count(*) FROM measurements")" = "$before" ] || fail "the merge target changed"
  "$T" merge "$W/bad.db" "$W/good.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "bad.db: damaged database" "$out" || fail "merge into it"
  # show reads without the check (what it reads may still fail, but not because of the check)
  "$T" show --db "$W/bad.db" >"$out" 2>&1
  grep -q "damaged database" "$out" && fail "show paid for the check"
  # the same file undamaged passes
  "$T" merge "$W/good.db" "$W/x.db" >"$out" 2>&1 || fail "merge of the good file: exit $?"
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_)"
