/* normlab lab: the one table of what a page keeps in its address bar. Plain JS, no build step.
 *
 * Declarations are the table (as TensorFlow Playground's state.ts keeps its PROPS apart from
 * the UI): the registry's parameter declarations for a widget's settings, and a page's own keys
 * declared the same way ({name, kind, default}). Every page reads its address with `read` and
 * writes it with `write`, handing over its entries {id, params, state, initial, each}. In the
 * entries' order the address holds:
 *
 * - ID.param=value for every parameter of an entry once any differs from `initial`, so a link
 *   reproduces the view, the seed included (a lesson's widget: ?drift.depth=12&drift.width=...);
 *   an empty id writes the bare names (/train's settings: ?depth=2&width=8&...);
 * - with `each: true`, every key alone where it differs from `initial` (/train's steps=3,
 *   speed=5, compare=1, hide=lr,seed and lock=depth);
 * - with `initial: null`, every parameter always; with `state: null`, none (/train's compared
 *   run: b.NAME while compare is on, nothing when it is off).
 *
 * An entry owns the keys under its ID. prefix (with an empty id: its declared names); `write`
 * drops those it does not write and keeps every other key as it was, first. Values are written
 * as the CLI takes them: numbers, true/false, comma-separated lists; the code, notebook and
 * playground routes take the same text (without the "ID." prefix). Besides the registry's kinds,
 * a page's own keys may be a "list" (comma-separated names) or a "flag" (on is written 1, and 1
 * or true read as on).
 */
"use strict";

(() => {
  /** A value from text; text that does not parse is kept so the API can name it. */
  function parseValue(p, text) {
    const t = text.trim();
    if (p.kind === "int") return /^[-+]?\d+$/.test(t) ? Number(t) : t;
    if (p.kind === "float") return t !== "" && Number.isFinite(Number(t)) ? Number(t) : t;
    if (p.kind === "bool") return t === "true" ? true : t === "false" ? false : t;
    if (p.kind === "flag") return t === "1" || t === "true";
    if (p.kind === "list") return t.split(",").map((s) => s.trim()).filter(Boolean);
    if (p.kind === "float_list") {
      const parts = t.split(",").map((s) => s.trim());
      const values = parts.map(Number);
      return parts.every((s) => s !== "") && values.every(Number.isFinite) ? values : t;
    }
    return t;
  }

  /** A value as the CLI takes it: lists comma-separated, booleans true/false, a flag 1 or 0. */
  function formatValue(p, v) {
    if (p.kind === "flag") return v ? "1" : "0";
    return Array.isArray(v) ? v.map(String).join(",") : String(v);
  }

  // commas stay readable in a shared link (they are legal in a query)
  const encode = (s) => encodeURIComponent(s).replace(/%2C/gi, ",");

  /** The address key of parameter `name` of widget `id` ("" for the bare name). */
  const key = (id, name) => (id ? `${id}.${name}` : name);

  const defaults = (params) => Object.fromEntries(params.map((p) => [p.name, p.default]));

  function sameParams(params, a, b) {
    return params.every((p) => JSON.stringify(a[p.name]) === JSON.stringify(b[p.name]));
  }

  /** "name=value&..." of every declared parameter, for the code, notebook and playground routes. */
  function query(params, values) {
    return params.map((p) => `${encode(p.name)}=${encode(formatValue(p, values[p.name]))}`).join("&");
  }

  /** What the address holds for widget `id`: {param: value} of those present. */
  function read(id, params) {
    const search = new URLSearchParams(location.search);
    const out = {};
    for (const p of params) {
      const text = search.get(key(id, p.name));
      if (text !== null) out[p.name] = parseValue(p, text);
    }
    return out;
  }

  /** Whether `entry` owns address key `k`: its ID. prefix, or (empty id) one of its names. */
  function owns(entry, k) {
    return entry.id ? k.startsWith(`${entry.id}.`) : entry.params.some((p) => p.name === k);
  }

  /** The "key=value" pairs `entry` writes (see the rules above). */
  function pairs({ id, params, state, initial, each }) {
    if (state === null) return [];
    const differs = (ps) => initial === null || !sameParams(ps, state, initial);
    const written = each ? params.filter((p) => differs([p])) : differs(params) ? params : [];
    return written.map((p) => `${encode(key(id, p.name))}=${encode(formatValue(p, state[p.name]))}`);
  }

  /** The query ("?..." or "") for `entries`: the keys none of them owns as they were, then theirs. */
  function search(entries) {
    const parts = [];
    for (const [k, v] of new URLSearchParams(location.search)) {
      if (!entries.some((e) => owns(e, k))) parts.push(`${encode(k)}=${encode(v)}`);
    }
    for (const entry of entries) parts.push(...pairs(entry));
    return parts.length ? `?${parts.join("&")}` : "";
  }

  /** Rewrite the address for `entries` ({id, params, state, initial, each}); other keys stay. */
  function write(entries) {
    const text = search(entries);
    if (text !== location.search) {
      history.replaceState(history.state, "", location.pathname + text + location.hash);
    }
  }

  window.NLState = {
    parseValue, formatValue, encode, key, defaults, sameParams, query, read, search, write,
  };
})();
