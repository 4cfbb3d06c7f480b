/* cmds.h: the attntune verbs; main.c dispatches argv to one of these (argv[0] is the verb).
 * Each returns the process exit code: 0 ok, 2 usage error (one-line reason on stderr), 1 anything else. */
#ifndef ATTN_CMDS_H
#define ATTN_CMDS_H

int attn_cmd_tune(int argc, char **argv);    /* tuner/cmd_tune.c (default verb) */
int attn_cmd_show(int argc, char **argv);    /* tuner/cmd_show.c */
int attn_cmd_export(int argc, char **argv);  /* tuner/cmd_json.c */
int attn_cmd_import(int argc, char **argv);  /* tuner/cmd_json.c */
int attn_cmd_merge(int argc, char **argv);   /* tuner/cmd_merge.c */
int attn_cmd_gpus(int argc, char **argv);    /* tuner/cmd_gpus.c */
int attn_cmd_io(int argc, char **argv);      /* tuner/cmd_io.c */
int attn_cmd_bench(int argc, char **argv);   /* tuner/cmd_bench.c */
int attn_cmd_replay(int argc, char **argv);  /* tuner/cmd_replay.c */
int attn_cmd_source(int argc, char **argv);  /* tuner/cmd_source.c */

#endif
