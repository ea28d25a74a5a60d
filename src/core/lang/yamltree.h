/*
 * yamltree.h — a definition's YAML as a small tree with source positions.
 *
 * The loader enforces the YAML layer's bounds (size, depth, scalar size,
 * aliases, documents, duplicate keys) while reading libyaml's events, so a
 * hostile document is refused before anything expands it.
 */
#ifndef WFE_YAMLTREE_H
#define WFE_YAMLTREE_H

#include <stddef.h>
#include <json-c/json.h>

#include "core/base/arena.h"
#include "diag.h"

#define WFE_YAML_MAX_DEPTH 64
#define WFE_YAML_MAX_SCALAR (64 * 1024)

typedef enum wfe_ynode_kind
{
	WFE_Y_SCALAR,
	WFE_Y_MAP,
	WFE_Y_SEQ
} wfe_ynode_kind;

/* A scalar's type under the YAML 1.2 core schema (tags honoured). */
typedef enum wfe_yscalar_type
{
	WFE_YS_NULL,
	WFE_YS_BOOL,
	WFE_YS_INT,
	WFE_YS_FLOAT,
	WFE_YS_STRING
} wfe_yscalar_type;

typedef struct wfe_ynode wfe_ynode;

struct wfe_ynode
{
	wfe_ynode_kind kind;
	int			line;			/* 1-based */
	int			column;			/* 1-based */

	/* scalars */
	wfe_yscalar_type type;
	char	   *text;			/* NUL-terminated copy of the scalar */
	size_t		len;
	long long	ival;
	double		dval;
	int			bval;

	/* mappings (keys[i] -> items[i]) and sequences (items[i]) */
	int			n;
	wfe_ynode **keys;
	wfe_ynode **items;
};

/*
 * Load one document.  Returns the root node, or NULL when the YAML layer
 * found an error (diagnostics already reported) or the document is empty.
 */
extern wfe_ynode *wfe_yaml_load(wfe_arena *arena, wfe_diags *diags,
								const char *source, size_t len,
								size_t max_bytes);

/* Member of a mapping by key, or NULL. */
extern wfe_ynode *wfe_ymap_get(const wfe_ynode *map, const char *key);

/* A scalar node's value as JSON (NULL for YAML null). */
extern json_object *wfe_ynode_to_json(const wfe_ynode *node);

/* Human name of a node's kind, for messages ("a mapping", "a string", ...). */
extern const char *wfe_ynode_describe(const wfe_ynode *node);

#endif							/* WFE_YAMLTREE_H */
