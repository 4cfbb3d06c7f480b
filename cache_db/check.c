/* check.c: the integrity check a writer (and a reader that asks) runs before it trusts a file: PRAGMA quick_check,
 * once per process per file, so that writers that reopen a file (the tuner's compile workers) pay once. */
#define _POSIX_C_SOURCE 200809L
#include "db_int.h"
#include <stdio.h>
#include <string.h>

/* Files that passed quick_check in this process, by (device, inode, size, mtime): any change to the file is checked
 * again. */
typedef struct {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} checked_file;
static pthread_mutex_t checked_mu = PTHREAD_MUTEX_INITIALIZER;
static checked_file checked[32];
static unsigned nchecked;

static int same_file(const checked_file *c, const struct stat *sb) {
  return c->dev == sb->st_dev && c->ino == sb->st_ino && c->size == sb->st_size &&
         c->mtime.tv_sec == sb->st_mtim.tv_sec && c->mtime.tv_nsec == sb->st_mtim.tv_nsec;
}

static int was_checked(const struct stat *sb) {
  pthread_mutex_lock(&checked_mu);
  int hit = 0;
  for (unsigned i = 0; i < nchecked && i < sizeof checked / sizeof checked[0] && !hit; i++)
    hit = same_file(&checked[i], sb);
  pthread_mutex_unlock(&checked_mu);
  return hit;
}

static void note_checked(const struct stat *sb) {
  pthread_mutex_lock(&checked_mu);
  checked_file *c = &checked[nchecked++ % (sizeof checked / sizeof checked[0])];
  c->dev = sb->st_dev;
  c->ino = sb->st_ino;
  c->size = sb->st_size;
  c->mtime = sb->st_mtim;
  pthread_mutex_unlock(&checked_mu);
}

static int damaged(attn_db *db, const char *why) {
  return attn_dbi_fail(db, ATTN_EDB, "damaged database (PRAGMA quick_check: %s); restore it from a copy, or export "
                       "what still reads", why);
}

/* PRAGMA quick_check(1): "ok", or the first complaint (a damaged page, a broken CHECK constraint), on one line. */
static int quick_check(attn_db *db) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db->h, "PRAGMA quick_check(1)", -1, &s, NULL) != SQLITE_OK) {
    sqlite3_finalize(s);
    return damaged(db, sqlite3_errmsg(db->h));
  }
  double t0 = attn_dbi_now_ms();
  int src;
  while (((src = sqlite3_step(s)) & 0xff) == SQLITE_BUSY && attn_dbi_now_ms() - t0 < db->timeout_ms) {
    sqlite3_reset(s);
    attn_dbi_nap_ms(10);
  }
  int rc = ATTN_OK;
  char why[512];
  why[0] = '\0';
  if (src == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(s, 0);
    if (!t || strcmp(t, "ok") != 0) snprintf(why, sizeof why, "%s", t ? t : "no answer");
  } else if ((src & 0xff) == SQLITE_BUSY) {
    rc = attn_dbi_fail(db, ATTN_EDB, "database is locked: the integrity check waited past the busy timeout (%d ms)",
                       db->timeout_ms);
  } else {
    snprintf(why, sizeof why, "%s", sqlite3_errmsg(db->h));
  }
  sqlite3_finalize(s);
  if (why[0]) {
    /* one line: drop SQLite's "*** in database main ***" heading, newlines to "; " */
    const char *w = why;
    static const char head[] = "*** in database main ***";
    if (strncmp(w, head, sizeof head - 1) == 0) w += sizeof head - 1;
    while (*w == '\n' || *w == ' ') w++;
    char flat[512];
    size_t k = 0;
    for (; *w && k + 3 < sizeof flat; w++) {
      if (*w == '\n') {
        flat[k++] = ';';
        flat[k++] = ' ';
      } else {
        flat[k++] = *w;
      }
    }
    flat[k] = '\0';
    rc = damaged(db, flat);
  }
  return rc;
}

int attn_dbi_check(attn_db *db, const struct stat *sb) {
  if (was_checked(sb)) return ATTN_OK;
  int rc = quick_check(db);
  if (rc == ATTN_OK) note_checked(sb);
  return rc;
}
