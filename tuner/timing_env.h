/* timing_env.h: the process environment every timing runs under (tune, bench and Lua's tune.evaluate alike):
 * settings that OpenMP and OpenBLAS read only when they load, so the process runs itself again once with them. */
#ifndef ATTN_TIMING_ENV_H
#define ATTN_TIMING_ENV_H

/* Sets what is missing and re-executes /proc/self/exe with the same arguments (once: ATTN_TIMING_REEXEC marks the
 * second run). who names the verb in the one line said on stderr unless quiet. Returns when nothing was missing,
 * on the second run, or when the exec failed (the caller then goes on as it is, and the line says so). */
void attn_timing_env(const char *who, int quiet);

/* The settings in force, for the log of a run ("GOMP_SPINCOUNT=10000 OPENBLAS_THREAD_TIMEOUT=4"). */
const char *attn_timing_env_text(void);

#endif
