/*
 * learnedidx.c: the learnedidx extension's module (learnedidx.h lists its files).
 *
 * _PG_init defines learnedidx.socket (PGC_SUSET: only superusers say where the server is);
 * unset, the server's default path rule applies, evaluated in the backend's environment.  And
 * learnedidx.parallel_workers: the parallel workers that read a call's pages (parallel.c).
 * _python_path tells the PL/Python functions where their modules are installed.
 */
#include "postgres.h"

#include <unistd.h>

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "learnedidx.h"

PG_MODULE_MAGIC;

static char *socket_path = NULL;
int			lx_parallel_workers_setting = -1;

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
	DefineCustomIntVariable("learnedidx.parallel_workers",
							"Parallel workers reading a training call's pages (-1: as PostgreSQL sizes a parallel scan).",
							"0 reads in the caller's backend alone; at most max_parallel_workers_per_gather.",
							&lx_parallel_workers_setting, -1, -1, 1024, PGC_USERSET, 0, NULL, NULL, NULL);
}

/* The server's socket: learnedidx.socket, else the default path rule. */
const char *
lx_socket_path(void)
{
	return (socket_path && *socket_path) ? socket_path : default_socket_path();
}

PG_FUNCTION_INFO_V1(learnedidx_python_path);

/*
 * learnedidx._python_path() RETURNS text: the directory `make install` puts the PL/Python
 * functions' modules in (PYTHON_DIR of the Makefile: $(datadir)/learnedidx/python), found as
 * PostgreSQL finds its share directory, relative to the server's executable, so a relocated
 * installation finds its own.
 */
Datum
learnedidx_python_path(PG_FUNCTION_ARGS)
{
	char		share[MAXPGPATH];

	get_share_path(my_exec_path, share);
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("%s/learnedidx/python", share)));
}
