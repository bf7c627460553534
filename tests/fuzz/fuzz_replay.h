/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one corpus-replay driver (replay.c) and the hooks a fuzz target may give it: a check run
 * after the whole corpus (e.g. "every message type had a valid seed"), and a seed writer for
 * `--make-corpus DIR`. Both are optional: replay.c has weak defaults.
 */
#ifndef FERRY_TEST_FUZZ_REPLAY_H
#define FERRY_TEST_FUZZ_REPLAY_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* After every input ran: 0, or nonzero (and a message on stderr) to fail the replay. */
int fuzz_replay_check(void);

/* Write the target's seed corpus into @dir: 0 or nonzero. */
int fuzz_make_corpus(const char *dir);

/* For seed writers: @dir/@name holds @prefix (@prefix_len bytes: a target's input kind, or
 * none) then @len bytes of @bytes. 0, or nonzero after a message on stderr. */
int fuzz_write_seed(const char *dir, const char *name, const void *prefix, size_t prefix_len,
		    const void *bytes, size_t len);

#endif
