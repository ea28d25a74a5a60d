#!/usr/bin/env python3
"""cel-spec-conformance.py -- run cel-spec's own conformance files through
wfe's CEL core, once, by hand (the suite lives outside the tree, so this is
not part of make test; test/unit/cel_cases.txt is).

    git clone https://github.com/google/cel-spec
    gcc -std=gnu11 -Isrc -DWFE_COMPILER_VERSION='"dev"' -o build/cel-spec-run \
        test/tools/cel_spec_run.c src/core/*/*.c -lyaml -ljson-c -lcrypto -lm
    test/tools/cel-spec-conformance.py build/cel-spec-run cel-spec/tests/simple/testdata \
        basic comparisons conversions dynamic fields fp_math integer_math lists \
        logic macros parse string timestamps

A case is in scope when it has no variable bindings, type environment,
container or disabled check, and its expected result is a scalar, a list or
a map of them, or an error (any error, at compile or evaluation time, counts
for an expected evaluation error: wfe refuses at compile time what CEL
reports at run time, docs/dsl.md "Where wfe differs from CEL" 4).  Prints
the count and every failing case with wfe's answer.
"""
import json, math, re, subprocess, sys, glob, os

def tokenize(t):
    """Protobuf text format -> tokens (strings decoded to bytes)."""
    i, n, out = 0, len(t), []
    while i < n:
        c = t[i]
        if c in ' \t\r\n,;': i += 1; continue
        if c == '#':
            while i < n and t[i] != '\n': i += 1
            continue
        if c in '{}<>:': out.append(('p', c)); i += 1; continue
        if c == '[':
            j = t.index(']', i); out.append(('id', t[i:j+1])); i = j + 1; continue
        if c in '"\'':
            q = c; j = i + 1; buf = bytearray()
            while t[j] != q:
                if t[j] == '\\':
                    e = t[j+1]
                    simple = {'n':10,'t':9,'r':13,'"':34,"'":39,'\\':92,'a':7,'b':8,'f':12,'v':11,'?':63}
                    if e in simple: buf.append(simple[e]); j += 2
                    elif e in '01234567':
                        k = j + 1; v = 0; m = 0
                        while m < 3 and t[k] in '01234567': v = v*8 + int(t[k]); k += 1; m += 1
                        buf.append(v & 0xFF); j = k
                    elif e in 'xX':
                        k = j + 2; h = ''
                        while len(h) < 2 and t[k] in '0123456789abcdefABCDEF': h += t[k]; k += 1
                        buf.append(int(h, 16)); j = k
                    elif e == 'u': buf += chr(int(t[j+2:j+6], 16)).encode('utf-8', 'surrogatepass'); j += 6
                    elif e == 'U': buf += chr(int(t[j+2:j+10], 16)).encode('utf-8', 'surrogatepass'); j += 10
                    else: raise ValueError('escape ' + e)
                else:
                    buf += t[j].encode('utf-8'); j += 1
            if out and out[-1][0] == 's': out[-1] = ('s', out[-1][1] + bytes(buf))
            else: out.append(('s', bytes(buf)))
            i = j + 1; continue
        m = re.match(r'[-+]?[A-Za-z0-9_.]+(?:[eE][-+]?[0-9]+)?', t[i:])
        out.append(('id', m.group(0))); i += len(m.group(0))
    return out

def parse_msg(toks, pos, end):
    """Tokens -> {field: [values]} up to the closing `end`."""
    d = {}
    while pos < len(toks) and toks[pos] != ('p', end):
        name = toks[pos][1]; pos += 1
        if toks[pos] == ('p', ':'): pos += 1
        if toks[pos] in (('p', '{'), ('p', '<')):
            close = '}' if toks[pos][1] == '{' else '>'
            v, pos = parse_msg(toks, pos + 1, close); pos += 1
        else:
            v = toks[pos][1]; pos += 1
        d.setdefault(name, []).append(v)
    return d, pos

def expected(v):
    """textproto Value -> python repr, or None when out of scope."""
    if not isinstance(v, dict) or len(v) != 1: return None
    (k, vals), = v.items()
    x = vals[0]
    if k == 'int64_value': return ('i', int(x))
    if k == 'uint64_value': return ('u', int(x))
    if k == 'double_value':
        s = x.lower()
        return ('d', float('inf') if s in ('inf', 'infinity') else float('-inf') if s in ('-inf', '-infinity') else float('nan') if s == 'nan' else float(x))
    if k == 'string_value': return ('s', x.decode('utf-8', 'surrogatepass'))
    if k == 'bool_value': return ('b', x == 'true')
    if k == 'null_value': return ('n',)
    if k == 'type_value': return ('t', x.decode())
    if k == 'list_value':
        if not isinstance(x, dict): x = {}
        items = [expected(e) for e in x.get('values', [])]
        return None if None in items else ('l', items)
    if k == 'map_value':
        if not isinstance(x, dict): x = {}
        es = []
        for e in x.get('entries', []):
            kk, vv = expected(e['key'][0]), expected(e['value'][0])
            if kk is None or vv is None: return None
            es.append((kk, vv))
        return ('m', es)
    return None

def unq(r):
    """The body of a string as wfe prints it -> the string."""
    out, i = [], 0
    simple = {'n': '\n', 't': '\t', 'r': '\r', '"': '"', "'": "'", '\\': '\\', 'a': '\a', 'b': '\b', 'f': '\f', 'v': '\v', '/': '/'}
    while i < len(r):
        if r[i] == '\\':
            e = r[i + 1]
            if e in simple: out.append(simple[e]); i += 2
            elif e == 'x': out.append(chr(int(r[i+2:i+4], 16))); i += 4
            elif e == 'u': out.append(chr(int(r[i+2:i+6], 16))); i += 6
            elif e == 'U': out.append(chr(int(r[i+2:i+10], 16))); i += 10
            else: raise ValueError(r)
        else:
            out.append(r[i]); i += 1
    return ''.join(out)

class P:
    """A value as wfe_expr_eval_format prints it -> the repr expected() makes."""
    def __init__(s, t): s.t, s.i = t, 0
    def ws(s):
        while s.i < len(s.t) and s.t[s.i] == ' ': s.i += 1
    def val(s):
        s.ws(); t = s.t; c = t[s.i]
        if c == '[':
            s.i += 1; items = []
            s.ws()
            if t[s.i] == ']': s.i += 1; return ('l', items)
            while True:
                items.append(s.val()); s.ws()
                if t[s.i] == ',': s.i += 1; continue
                s.i += 1; return ('l', items)
        if c == '{':
            s.i += 1; es = []
            s.ws()
            if t[s.i] == '}': s.i += 1; return ('m', es)
            while True:
                k = s.val(); s.ws(); s.i += 1; v = s.val(); es.append((k, v)); s.ws()
                if t[s.i] == ',': s.i += 1; continue
                s.i += 1; return ('m', es)
        if c == '"':
            j = s.i + 1
            while t[j] != '"':
                j += 2 if t[j] == '\\' else 1
            raw = t[s.i:j+1]; s.i = j + 1
            return ('s', unq(raw[1:-1]))
        m = re.match(r'[-+]?(?:[0-9][0-9.eE+-]*u?|Inf|NaN)|[A-Za-z_][A-Za-z0-9_.]*(?:\([^)]*\))?', t[s.i:])
        tok = m.group(0); s.i += len(tok)
        if tok in ('true', 'false'): return ('b', tok == 'true')
        if tok == 'null': return ('n',)
        if tok.endswith('u') and tok[:-1].isdigit(): return ('u', int(tok[:-1]))
        if re.fullmatch(r'-?[0-9]+', tok): return ('i', int(tok))
        if re.fullmatch(r'[-+]?(?:[0-9][0-9.eE+-]*|Inf|NaN)', tok): return ('d', float(tok.replace('Inf', 'inf').replace('NaN', 'nan')))
        return ('t', tok)

def same(a, b):
    """Equal values (NaN equals NaN here; map entries in any order)."""
    if a[0] != b[0]: return False
    if a[0] == 'd':
        return (math.isnan(a[1]) and math.isnan(b[1])) or a[1] == b[1]
    if a[0] == 'l': return len(a[1]) == len(b[1]) and all(same(x, y) for x, y in zip(a[1], b[1]))
    if a[0] == 'm':
        if len(a[1]) != len(b[1]): return False
        return all(any(same(k, k2) and same(v, v2) for k2, v2 in b[1]) for k, v in a[1])
    return a == b

def main():
    runner, testdata, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    cases = []
    for f in [os.path.join(testdata, n + '.textproto') for n in names]:
        d, _ = parse_msg(tokenize(open(f, encoding='utf-8').read()), 0, None)
        for sec in d.get('section', []):
            for t in sec.get('test', []):
                name = '%s/%s/%s' % (os.path.basename(f)[:-10], sec['name'][0].decode(), t['name'][0].decode())
                if any(k in t for k in ('bindings', 'type_env', 'container', 'disable_check', 'check_only', 'typed_result', 'unknown', 'any_eval_errors', 'any_unknowns')):
                    cases.append((name, None, 'scope: bindings/env/container')); continue
                src = t['expr'][0].decode('utf-8')
                if 'value' in t:
                    e = expected(t['value'][0])
                    if e is None: cases.append((name, None, 'scope: result type')); continue
                    cases.append((name, src, e))
                elif 'eval_error' in t:
                    cases.append((name, src, 'error'))
                else:
                    cases.append((name, src, ('b', True)))
    inscope = [c for c in cases if c[1] is not None]
    p = subprocess.run([runner], input='\n'.join(json.dumps(c[1]) for c in inscope) + '\n',
                       capture_output=True, text=True)
    outs = [json.loads(l) for l in p.stdout.splitlines()]
    passed, failed = 0, []
    for (name, src, want), got in zip(inscope, outs):
        if want == 'error':
            good = got['stage'] != 'ok'
        else:
            good = got['stage'] == 'ok' and same(P(got['value']).val(), want)
        if good: passed += 1
        else: failed.append((name, src, want, got))
    print('in scope: %d, passed %d, failed %d (out of scope: %d)' % (len(inscope), passed, len(failed), len(cases) - len(inscope)))
    for name, src, want, got in failed:
        print('FAIL %s: %s\n   want %s\n   got  %s %s %s' % (name, src, want, got['stage'], got['value'], got['msg']))

main()
