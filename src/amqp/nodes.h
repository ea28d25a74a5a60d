/*
 * nodes.h — a RabbitMQ cluster as wfe's clients name it: wfe.amqp_uri (and
 * wfe-worker's --amqp-uri) may list several nodes' amqp:// URIs separated by
 * commas.  A client connects to the first that answers, starting after the
 * node whose connection dropped, so it moves on instead of waiting for that
 * node to come back.  No PostgreSQL headers: wfe-worker links this file too.
 */
#ifndef WFE_NODES_H
#define WFE_NODES_H

#include <stdbool.h>
#include <stddef.h>

/* How many URIs the list holds (an empty list counts as one empty URI). */
extern int	wfe_amqp_node_count(const char *uris);

/*
 * Copy the i-th URI of the list (from 0, surrounding blanks removed) into
 * buf of the given size; false when there is no such URI or it does not fit.
 */
extern bool wfe_amqp_node_uri(const char *uris, int i, char *buf, size_t size);

/*
 * The host:port part of a URI, for log lines (never the credentials): what
 * follows the last '@' of the authority, up to the path.
 */
extern void wfe_amqp_node_address(const char *uri, char *buf, size_t size);

#endif							/* WFE_NODES_H */
