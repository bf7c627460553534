/* SPDX-License-Identifier: Apache-2.0 */
/* ferry-node's command line (node_opts.c). */
#ifndef FERRY_NODE_NODE_OPTS_H
#define FERRY_NODE_NODE_OPTS_H

#include "node/node.h"

/*
 * ferry__node_parse_args() - fill @o (zeroed by the caller) and *@token_file from @argv[1..@argc)
 * ("--flag value" pairs; --help and --version are the caller's). 0, or -EINVAL (an unknown
 * flag, a flag without its value, a bad value, or --gcs / --token-file missing or empty;
 * printed to stderr).
 */
int ferry__node_parse_args(int argc, const char *const *argv, struct ferry__node_opts *o,
			   const char **token_file);

#endif
