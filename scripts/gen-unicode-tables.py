#!/usr/bin/env python3
"""gen-unicode-tables.py -- write src/core/jsonschema/uniprop_tables.h, the
Unicode property tables of the regex engine's \\p{...} / \\P{...} escapes.

Reads the Unicode Character Database as Debian ships it (package
unicode-data, /usr/share/unicode): UnicodeData.txt (General_Category),
Scripts.txt and ScriptExtensions.txt (Script, Script_Extensions) and
PropertyValueAliases.txt (the short and long names of each value).  The
output is checked into the tree, so building wfe needs no Unicode data;
run this again (and commit the result) to move to a newer Unicode:

    scripts/gen-unicode-tables.py [/usr/share/unicode] > src/core/jsonschema/uniprop_tables.h

The output depends only on the input files: the same data gives the same
bytes.
"""
import os
import re
import sys

MAX_CP = 0x10FFFF


def data_lines(path):
    """The fields of each non-comment line of a UCD file."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield [x.strip() for x in line.split(";")]


def cp_range(text):
    """'0041..005A' or '0041' -> (lo, hi)."""
    if ".." in text:
        lo, hi = text.split("..")
        return int(lo, 16), int(hi, 16)
    return int(text, 16), int(text, 16)


def to_ranges(cps):
    """Sorted code points -> merged [lo, hi] ranges."""
    out = []
    for c in cps:
        if out and out[-1][1] + 1 == c:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def general_categories(ucd):
    """Code point -> two-letter General_Category (Cn where unassigned)."""
    gc = ["Cn"] * (MAX_CP + 1)
    first = None
    for f in data_lines(os.path.join(ucd, "UnicodeData.txt")):
        cp, name, cat = int(f[0], 16), f[1], f[2]
        if name.endswith(", First>"):
            first = cp
            continue
        if name.endswith(", Last>"):
            for c in range(first, cp + 1):
                gc[c] = cat
            first = None
            continue
        gc[cp] = cat
    return gc


def scripts(ucd):
    """Code point -> long Script name (Unknown where unassigned)."""
    sc = ["Unknown"] * (MAX_CP + 1)
    for f in data_lines(os.path.join(ucd, "Scripts.txt")):
        lo, hi = cp_range(f[0])
        for c in range(lo, hi + 1):
            sc[c] = f[1]
    return sc


def script_extensions(ucd, sc, short_to_long):
    """Code point -> set of long Script names (its Script where not listed)."""
    scx = {}
    for f in data_lines(os.path.join(ucd, "ScriptExtensions.txt")):
        lo, hi = cp_range(f[0])
        names = frozenset(short_to_long[s] for s in f[1].split())
        for c in range(lo, hi + 1):
            scx[c] = names
    return scx


def aliases(ucd):
    """{'gc': [[short, long, more...], ...], 'sc': [...]} from PropertyValueAliases.txt."""
    out = {"gc": [], "sc": []}
    for f in data_lines(os.path.join(ucd, "PropertyValueAliases.txt")):
        if f[0] in out:
            out[f[0]].append(f[1:])
    return out


def unicode_version(ucd):
    """The version named in Scripts.txt's first line ('# Scripts-15.0.0.txt')."""
    with open(os.path.join(ucd, "Scripts.txt"), encoding="utf-8") as f:
        m = re.search(r"Scripts-([0-9.]+)\.txt", f.readline())
    return m.group(1) if m else "unknown"


# The composite General_Category values and their members (UAX #44, 5.7.1).
COMPOSITE = {
    "L": ["Lu", "Ll", "Lt", "Lm", "Lo"], "LC": ["Lu", "Ll", "Lt"],
    "M": ["Mn", "Mc", "Me"], "N": ["Nd", "Nl", "No"],
    "P": ["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"],
    "S": ["Sm", "Sc", "Sk", "So"], "Z": ["Zs", "Zl", "Zp"],
    "C": ["Cc", "Cf", "Cs", "Co", "Cn"],
}


def main():
    ucd = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
    names = aliases(ucd)
    gc = general_categories(ucd)
    sc = scripts(ucd)
    short_to_long = {a[0]: a[1] for a in names["sc"]}
    scx = script_extensions(ucd, sc, short_to_long)

    tables = []     # (label, ranges)
    entries = []    # (kind, name, table index)

    def add_table(label, cps):
        tables.append((label, to_ranges(cps)))
        return len(tables) - 1

    # General_Category: every value, under each of its names
    by_gc = {}
    for c in range(MAX_CP + 1):
        by_gc.setdefault(gc[c], []).append(c)
    for a in names["gc"]:
        short = a[0]
        members = COMPOSITE.get(short, [short])
        cps = sorted(c for m in members for c in by_gc.get(m, []))
        t = add_table("gc=" + short, cps)
        for n in a:
            entries.append(("GC", n, t))

    # Script and Script_Extensions: every script, under each of its names
    by_sc = {}
    for c in range(MAX_CP + 1):
        by_sc.setdefault(sc[c], []).append(c)
    by_scx = {}
    for c in range(MAX_CP + 1):
        for s in scx.get(c, (sc[c],)):
            by_scx.setdefault(s, []).append(c)
    for a in names["sc"]:
        long = a[1]
        t = add_table("sc=" + long, by_sc.get(long, []))
        tx = add_table("scx=" + long, sorted(by_scx.get(long, [])))
        for n in a:
            entries.append(("SC", n, t))
            entries.append(("SCX", n, tx))

    # the binary properties ECMA-262 defines without data files
    t = add_table("Any", range(MAX_CP + 1))
    entries.append(("BINARY", "Any", t))
    t = add_table("ASCII", range(0x80))
    entries.append(("BINARY", "ASCII", t))
    t = add_table("Assigned", [c for c in range(MAX_CP + 1) if gc[c] != "Cn"])
    entries.append(("BINARY", "Assigned", t))

    # a lone name must mean one thing (RE2's lone script names included)
    lone = {}
    for kind, n, t in entries:
        if kind == "SCX":
            continue
        assert lone.setdefault(n, (kind, t)) == (kind, t), "ambiguous name " + n
    entries.sort(key=lambda e: (e[1], e[0]))

    total = sum(len(r) for _, r in tables)
    out = sys.stdout
    out.write("/*\n * uniprop_tables.h -- Unicode %s property tables for the regex engine's\n"
              " * \\p{...} escapes (src/core/jsonschema/uniprop.c, the only includer).\n *\n"
              " * GENERATED by scripts/gen-unicode-tables.py from the Unicode Character\n"
              " * Database (Debian's unicode-data package): do not edit; run the script.\n"
              " * %d tables, %d ranges.\n */\n" % (unicode_version(ucd), len(tables), total))
    out.write("#define WFE_UNICODE_VERSION \"%s\"\n\n" % unicode_version(ucd))
    out.write("/* Every table's ranges, sorted and merged, one table after another. */\n")
    out.write("static const wfe_uc_range uc_ranges[%d] = {\n" % total)
    starts = []
    pos = 0
    for label, ranges in tables:
        starts.append(pos)
        out.write("\t/* %s */\n" % label)
        line = "\t"
        for lo, hi in ranges:
            item = "{0x%X, 0x%X}, " % (lo, hi)
            if len(line) + len(item) > 78:
                out.write(line.rstrip() + "\n")
                line = "\t"
            line += item
        if line.strip():
            out.write(line.rstrip() + "\n")
        pos += len(ranges)
    out.write("};\n\n")
    out.write("/* Each table: its first range in uc_ranges and its number of ranges. */\n")
    out.write("static const wfe_uc_table uc_tables[%d] = {\n" % len(tables))
    for (label, ranges), start in zip(tables, starts):
        out.write("\t{%d, %d},\t\t\t/* %s */\n" % (start, len(ranges), label))
    out.write("};\n\n")
    out.write("/* Every name of every value, sorted by name: which table it denotes. */\n")
    out.write("static const wfe_uc_name uc_names[%d] = {\n" % len(entries))
    for kind, n, t in entries:
        out.write("\t{\"%s\", UC_%s, %d},\n" % (n, kind, t))
    out.write("};\n")


if __name__ == "__main__":
    main()
