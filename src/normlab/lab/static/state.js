/* normlab lab: the state of every widget, kept in the address bar. Plain JS, no build step.
 *
 * The registry's parameter declarations are the table of what a state holds (as TensorFlow
 * Playground's state.ts keeps its PROPS apart from the UI). A widget's state is written as
 * ?ID.param=value for each of its parameters once any differs from where the page started it,
 * so a link reproduces the view, the seed included. Values are written as the CLI takes them:
 * numbers, true/false, comma-separated lists; the code, notebook and playground routes take
 * the same text (without the "ID." prefix).
 */
"use strict";

(() => {
  /** A value from text; text that does not parse is kept so the API can name it. */
  function parseValue(p, text) {
    const t = text.trim();
    if (p.kind === "int") return /^[-+]?\d+$/.test(t) ? Number(t) : t;
    if (p.kind === "float") return t !== "" && Number.isFinite(Number(t)) ? Number(t) : t;
    if (p.kind === "bool") return t === "true" ? true : t === "false" ? false : t;
    if (p.kind === "float_list") {
      const parts = t.split(",").map((s) => s.trim());
      const values = parts.map(Number);
      return parts.every((s) => s !== "") && values.every(Number.isFinite) ? values : t;
    }
    return t;
  }

  /** A value as the CLI takes it: lists comma-separated, booleans true/false. */
  const formatValue = (p, v) => (Array.isArray(v) ? v.map(String).join(",") : String(v));

  // commas stay readable in a shared link (they are legal in a query)
  const encode = (s) => encodeURIComponent(s).replace(/%2C/gi, ",");

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
      const text = search.get(`${id}.${p.name}`);
      if (text !== null) out[p.name] = parseValue(p, text);
    }
    return out;
  }

  /** Rewrite the address for `widgets` ({id, params, state, initial}); other keys stay. */
  function write(widgets) {
    const mine = (key) => widgets.some((w) => key.startsWith(`${w.id}.`));
    const parts = [];
    for (const [k, v] of new URLSearchParams(location.search)) {
      if (!mine(k)) parts.push(`${encode(k)}=${encode(v)}`);
    }
    for (const w of widgets) {
      if (sameParams(w.params, w.state, w.initial)) continue;
      for (const p of w.params) {
        parts.push(`${encode(`${w.id}.${p.name}`)}=${encode(formatValue(p, w.state[p.name]))}`);
      }
    }
    const search = parts.length ? `?${parts.join("&")}` : "";
    if (search !== location.search) {
      history.replaceState(history.state, "", location.pathname + search + location.hash);
    }
  }

  window.NLState = { parseValue, formatValue, encode, defaults, sameParams, query, read, write };
})();
