// normlab lab: the one DOM helper every script of the lab builds its markup with.
"use strict";

(function () {
  // el("p", {class: "x", text: "hi"}, child, ...): attributes set as given (true -> present,
  // false/null/undefined -> left out), "text" as the text content, children appended.
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) node.append(c);
    return node;
  }

  window.NLDom = { el };
})();
