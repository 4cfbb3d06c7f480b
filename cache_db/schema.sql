-- schema.sql: migration 1 of the attntune database (the initial schema). db.c applies it, and every later
-- migration in its list, inside one transaction per step and records the step in PRAGMA user_version.
-- Columns added later (threads, final, chosen, bound, d_v, ...) are in those migrations: schema 7 gave kernels and
-- measurements d_v, the head dimension of V and O, with d_v = d for every row stored before it.
-- Schema 8 gave measurements pass ('fwd' | 'bwd') and variant ('' for dense attention) in the problem key, with
-- 'fwd' and '' for every row stored before it.

-- A device rows were measured on ("cpu:<model>") or modelled for (a GPU table name such as "H100").
CREATE TABLE devices (
  id    INTEGER PRIMARY KEY,
  name  TEXT NOT NULL UNIQUE,
  kind  TEXT NOT NULL CHECK (kind IN ('cpu', 'cuda')),
  arch  TEXT,                         -- "sm_80", "x86_64", ... (may be NULL)
  info  TEXT                          -- JSON description written by the tuner
);

-- A kernel configuration: attn_spec_format's canonical text is the key.
CREATE TABLE kernels (
  id          INTEGER PRIMARY KEY,
  spec        TEXT NOT NULL UNIQUE,
  algo        TEXT NOT NULL,          -- flash | smallcache | lowrank
  target      TEXT NOT NULL,          -- cpu | cuda
  dtype       TEXT NOT NULL,          -- f32 | f16 | bf16
  d           INTEGER NOT NULL,
  source_hash TEXT
);

-- Compiled code (shared objects, cubins) so the runtime needs no compiler for a tuned kernel.
CREATE TABLE artifacts (
  source_hash TEXT NOT NULL,
  compiler    TEXT NOT NULL,
  flags       TEXT NOT NULL,
  arch        TEXT NOT NULL,
  blob        BLOB NOT NULL,
  created     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (source_hash, compiler, flags, arch)
);

-- One tuner command.
CREATE TABLE runs (
  id        INTEGER PRIMARY KEY,
  device_id INTEGER REFERENCES devices(id),
  started   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  ended     TEXT,
  command   TEXT NOT NULL,
  status    TEXT NOT NULL DEFAULT 'running'   -- running | done | interrupted | failed
);

-- One evaluation of a kernel on a problem shape: measured on the device or estimated by the performance model.
CREATE TABLE measurements (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  device_id  INTEGER NOT NULL REFERENCES devices(id),
  kernel_id  INTEGER NOT NULL REFERENCES kernels(id),
  n          INTEGER NOT NULL,
  n_kv       INTEGER NOT NULL,
  d          INTEGER NOT NULL,
  dtype      TEXT NOT NULL CHECK (dtype IN ('f32', 'f16', 'bf16')),
  causal     INTEGER NOT NULL CHECK (causal IN (0, 1)),
  batch      INTEGER NOT NULL,
  heads      INTEGER NOT NULL,
  heads_kv   INTEGER NOT NULL,
  time_ms    REAL NOT NULL,
  gflops     REAL,
  reads      INTEGER,                 -- entries read from slow memory (counting build or model); NULL: unknown
  writes     INTEGER,
  error      REAL,                    -- relative Frobenius error vs fp64; NULL: not measured
  status     TEXT NOT NULL CHECK (status IN ('ok', 'wrong', 'compile_error', 'launch_error', 'skipped',
                                             'invalid', 'error')),
  log        TEXT NOT NULL DEFAULT '',
  provenance TEXT NOT NULL CHECK (provenance IN ('measured', 'model')),
  created    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (device_id, kernel_id, n, n_kv, dtype, causal, batch, heads, heads_kv, provenance)
);
CREATE INDEX measurements_kernel ON measurements(kernel_id);
CREATE INDEX measurements_run ON measurements(run_id);
