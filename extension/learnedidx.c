/*
 * learnedidx.c: the learnedidx extension's module (learnedidx.h lists its files).
 *
 * _PG_init defines learnedidx.socket (PGC_SUSET: only superusers say where the server is);
 * unset, the server's default path rule applies, evaluated in the backend's environment.
 */
#include "postgres.h"

#include <unistd.h>

#include "utils/guc.h"
#include "utils/memutils.h"

#include "learnedidx.h"

PG_MODULE_MAGIC;

static char *socket_path = NULL;

void		_PG_init(void);

/* learnedidx.server.protocol.default_socket_path(), in the backend's environment. */
static char *
default_socket_path(void)
{
	const char *env = getenv("LEARNEDIDX_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char	   *path;

	if (env && *env)
		path = pstrdup(env);
	else if (xdg && *xdg)
	{
		size_t		n = strlen(xdg);

		while (n > 1 && xdg[n - 1] == '/')
			n--;
		path = psprintf("%.*s/learnedidx/accel.sock", (int) n, xdg);
	}
	else
		path = psprintf("/tmp/learnedidx-%d/accel.sock", (int) getuid());
	return MemoryContextStrdup(TopMemoryContext, path);
}

void
_PG_init(void)
{
	DefineCustomStringVariable("learnedidx.socket",
							   "Unix socket of the learnedidx accelerator server.",
							   "Only superusers set it; unset, the server's default path rule applies.",
							   &socket_path, default_socket_path(), PGC_SUSET, 0, NULL, NULL, NULL);
}

/* The server's socket: learnedidx.socket, else the default path rule. */
const char *
lx_socket_path(void)
{
	return (socket_path && *socket_path) ? socket_path : default_socket_path();
}
