/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every program prints for --version (and ferry-bench puts beside its figures): the
 * project version and the git commit of the build. One place, so all programs agree.
 *
 * Thread model: thread-safe (constant data).
 */
#ifndef FERRY_COMMON_VERSION_H
#define FERRY_COMMON_VERSION_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ferry__version() - "0.1.0 (commit 1a2b3c4d5e6f)"; "unknown" where git was not available. */
const char *ferry__version(void);

/* ferry__version_commit() - the git commit alone ("1a2b3c4d5e6f", "-dirty" appended for a
 * changed tree), as benchmark rows and their JSON name it. */
const char *ferry__version_commit(void);

/* ferry__version_print() - "@program 0.1.0 (commit ...)" and a newline on stdout. */
void ferry__version_print(const char *program);

/* The flags every program answers the same way: -h/--help (usage on stdout, exit 0) and
 * --version (exit 0). */
static inline bool ferry__is_help_flag(const char *arg)
{
	return arg && (!strcmp(arg, "--help") || !strcmp(arg, "-h"));
}

static inline bool ferry__is_version_flag(const char *arg)
{
	return arg && !strcmp(arg, "--version");
}

/*
 * ferry__args_none() - for a program that takes no arguments but --help and --version: answers
 * those (@usage or the version on stdout). Returns -1 when there was no argument (run), else the
 * exit code: 0 after --help/--version, 2 after anything else (said why, usage on stderr).
 */
int ferry__args_none(int argc, char *const argv[], const char *program, const char *usage);

/*
 * ferry__args_help() - for a daemon whose flags come in "--flag value" pairs: answers a -h,
 * --help or --version in a flag's place (@usage(stdout) or the version; a value is never
 * taken for one). Returns 1 when it answered (exit 0), else 0.
 */
int ferry__args_help(int argc, char *const argv[], const char *program, void (*usage)(FILE *to));

#endif
