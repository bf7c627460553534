/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry_strerror(): errno descriptions, with Ferry's meaning for the domain errors. The one
 * error-text function of the tree (logs, CLI messages, tests): static strings, no buffer, so
 * any thread may call it, unlike strerror(3).
 */
#include <errno.h>
#include <string.h>

#include <ferry/common.h>

const char *ferry_strerror(int err)
{
	const char *desc;

	if (err < 0)
		err = -err;
	/* The errno values Ferry gives a domain meaning (style.md "Errors"). */
	switch (err) {
	case 0:
		return "Success";
	case ENOSPC:
		return "No space left (store or disk full)";
	case EPROTO:
		return "Protocol error (malformed or unexpected message)";
	case EACCES: /* also a file's mode: every error text goes through here (no strerror) */
		return "Permission denied (a file's mode, or a bad cluster token)";
	case ECONNRESET:
		return "Connection reset (peer gone)";
	case ETIMEDOUT:
		return "Timed out (the deadline passed)";
	case EUSERS: /* a server (GCS, store) holds as many clients as it may */
		return "Too many users (the server is at its client limit)";
	default:
		break;
	}
	/* strerrordesc_np() returns static strings and is thread-safe, unlike strerror(3). */
	desc = strerrordesc_np(err);
	return desc ? desc : "Unknown error";
}
