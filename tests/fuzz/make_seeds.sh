#!/bin/sh
# make_seeds.sh BUILD_DIR: regenerates the generated seeds of tests/fuzz/ from a build of this tree (a maintainer's
# step, not a test; the seeds are committed). Needs BUILD_DIR/tuner/attntune, BUILD_DIR/gen/libattn_gen.a, cc, sqlite3.
#   spec/default-*     attn_spec_format of attn_spec_default for each algorithm, target, dtype (and a few variants)
#   import/export.json `attntune export` of the database below
#   db/tuner.db        a database the tuner made (A100 model rows; CPU rows measured here), its compiled artifacts
#                      replaced by one small one under the key fuzz_db.c reads ("fuzz", "cc", "", ""), vacuumed into
#                      1024-byte pages (under 64 KiB); and variants: compact (512-byte pages), truncated, damaged,
#                      older and newer schema versions, NULLs in NOT NULL columns
set -eu
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- spec: canonical texts of the defaults
cat > "$tmp/specs.c" <<'C'
#include <stdio.h>
#include "spec.h"
int main(int argc, char **argv) {
  (void)argc;
  static const struct { attn_algo a; attn_target t; attn_dtype dt; int d, causal; } c[] = {
      {ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 64, 0},       {ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 256, 1},
      {ATTN_ALGO_SMALLCACHE, ATTN_TARGET_CPU, ATTN_F32, 128, 0}, {ATTN_ALGO_LOWRANK, ATTN_TARGET_CPU, ATTN_F32, 64, 0},
      {ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 64, 0},      {ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_BF16, 256, 1},
      {ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F32, 128, 0},     {ATTN_ALGO_SMALLCACHE, ATTN_TARGET_CUDA, ATTN_F16, 128, 1},
      {ATTN_ALGO_LOWRANK, ATTN_TARGET_CUDA, ATTN_BF16, 128, 0},  {ATTN_ALGO_LOWRANK, ATTN_TARGET_CUDA, ATTN_F32, 256, 0},
  };
  char path[4096], text[512];
  for (size_t i = 0; i < sizeof c / sizeof c[0] + 3; i++) {
    attn_spec s;
    if (i < sizeof c / sizeof c[0]) {
      s = attn_spec_default(c[i].a, c[i].t, c[i].dt, c[i].d, c[i].causal);
    } else if (i == sizeof c / sizeof c[0]) { /* split-K, written only when > 1 */
      s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CPU, ATTN_F32, 128, 0);
      s.split = 4;
      s.unroll = 4;
    } else if (i == sizeof c / sizeof c[0] + 1) { /* Taylor features */
      s = attn_spec_default(ATTN_ALGO_LOWRANK, ATTN_TARGET_CPU, ATTN_F32, 16, 1);
      s.feature = ATTN_FEAT_TAYLOR;
      s.degree = 4;
    } else { /* sm_90a */
      s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, ATTN_F16, 128, 0);
      snprintf(s.arch, sizeof s.arch, "sm_90a");
    }
    char err[256];
    if (attn_spec_check(&s, err, sizeof err) != ATTN_OK) { fprintf(stderr, "%s\n", err); return 1; }
    attn_spec_format(&s, text, sizeof text);
    snprintf(path, sizeof path, "%s/default-%02zu", argv[1], i);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) return 1;
  }
  return 0;
}
C
cc -std=c17 -I"$src/gen" -I"$src/runtime" -I"$src/templates" "$tmp/specs.c" "$build/gen/libattn_gen.a" -o "$tmp/specs"
rm -f "$here"/spec/default-*
"$tmp/specs" "$here/spec"

# ---- db and import: a database the tuner made
export ATTN_CACHE_DIR="$tmp/so" ATTN_DB="$tmp/none.db"
db="$tmp/tuner.db"
"$build/tuner/attntune" --gpu A100 --d 64 --n 256 --dtype f16 --budget 3 --db "$db" >/dev/null 2>&1
"$build/tuner/attntune" --gpu cpu --d 64 --n 64 --budget 2 --reps 1 --time-cap 0.05 --heads 1 --db "$db" >/dev/null 2>&1
printf 'fuzz artifact' > "$tmp/blob"
sha=$(sha256sum "$tmp/blob" | cut -d' ' -f1)
sqlite3 "$db" "DELETE FROM artifacts; INSERT INTO artifacts(source_hash, compiler, flags, arch, blob, sha256)
  VALUES ('fuzz', 'cc', '', '', CAST('fuzz artifact' AS BLOB), '$sha'); VACUUM;" >/dev/null
"$build/tuner/attntune" export "$here/import/export.json" --db "$db" 2>/dev/null
d="$here/db"
rm -f "$d"/*.db
# 4096-byte pages need 17 of them for the schema alone: 1024-byte pages keep the file under 64 KiB
sqlite3 "$db" "PRAGMA journal_mode = DELETE; PRAGMA page_size = 1024; VACUUM; PRAGMA journal_mode = WAL;" >/dev/null
cp "$db" "$d/tuner.db"
cp "$db" "$tmp/compact.db"
sqlite3 "$tmp/compact.db" "PRAGMA journal_mode = DELETE; PRAGMA page_size = 512; VACUUM;
  PRAGMA journal_mode = WAL;" >/dev/null
cp "$tmp/compact.db" "$d/compact.db"
size=$(wc -c < "$d/compact.db")
head -c 100 "$d/compact.db" > "$d/truncated-header.db"
head -c 512 "$d/compact.db" > "$d/truncated-page1.db"
head -c $((size / 2)) "$d/compact.db" > "$d/truncated-half.db"
head -c $((size - 1)) "$d/compact.db" > "$d/truncated-1.db"
: > "$d/empty.db"
printf 'not a database\n' > "$d/text.db"
# damaged: the magic, the page size, one page of the measurements table zeroed, the schema page overwritten
cp "$d/compact.db" "$d/bad-magic.db"
printf 'SQLite format 4' | dd of="$d/bad-magic.db" bs=1 seek=0 conv=notrunc 2>/dev/null
cp "$d/compact.db" "$d/bad-pagesize.db"
printf '\003\000' | dd of="$d/bad-pagesize.db" bs=1 seek=16 conv=notrunc 2>/dev/null
root=$(sqlite3 "$d/compact.db" "SELECT rootpage FROM sqlite_schema WHERE name = 'measurements'")
cp "$d/compact.db" "$d/zeroed-measurements.db"
dd if=/dev/zero of="$d/zeroed-measurements.db" bs=512 seek=$((root - 1)) count=1 conv=notrunc 2>/dev/null
cp "$d/compact.db" "$d/zeroed-schema.db"
dd if=/dev/zero of="$d/zeroed-schema.db" bs=1 seek=200 count=300 conv=notrunc 2>/dev/null
# schema versions: an older one (a writer migrates; the migration finds its objects there), a newer one
cp "$d/compact.db" "$d/version1.db"
sqlite3 "$d/version1.db" "PRAGMA user_version = 1" >/dev/null
cp "$d/compact.db" "$d/version99.db"
sqlite3 "$d/version99.db" "PRAGMA user_version = 99" >/dev/null
# a CHECK constraint broken in place (quick_check's complaint): a status that is not one of the list
cp "$d/compact.db" "$d/bad-check.db"
sqlite3 "$d/bad-check.db" "PRAGMA ignore_check_constraints = 1;
  UPDATE measurements SET status = 'bogus' WHERE id = (SELECT min(id) FROM measurements)" >/dev/null
# NULLs where the schema says NOT NULL, the schema edited to match (so that quick_check passes): what a database made
# elsewhere can hold, and every reader's NULL handling
cp "$d/compact.db" "$d/null-columns.db"
sqlite3 "$d/null-columns.db" "PRAGMA writable_schema = ON;
  UPDATE sqlite_schema SET sql = replace(sql, 'NOT NULL', '')
    WHERE name IN ('kernels', 'measurements', 'devices', 'runs');
  UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (provenance IN', 'CHECK (1 OR provenance IN')
    WHERE name = 'measurements';
  PRAGMA writable_schema = OFF;" >/dev/null
sqlite3 "$d/null-columns.db" "UPDATE kernels SET spec = NULL WHERE id = (SELECT min(id) FROM kernels);
  UPDATE measurements SET provenance = NULL, created = NULL, log = NULL WHERE provenance = 'model';
  UPDATE devices SET kind = NULL, info = NULL; UPDATE runs SET command = NULL, started = NULL;
  PRAGMA quick_check;" >/dev/null
# a device without a name: `attntune merge` compared names and crashed on it (cache_db refuses such a device now)
cp "$d/null-columns.db" "$d/regress-null-device-name.db"
sqlite3 "$d/regress-null-device-name.db" "UPDATE devices SET name = NULL
  WHERE id = (SELECT max(id) FROM devices)" >/dev/null
ls -l "$d" "$here/import" "$here/spec"
