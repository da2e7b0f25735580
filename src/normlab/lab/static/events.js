/* normlab lab: a Server-Sent Events stream read with fetch, so that a refusal can be read.
 *
 * EventSource hides a refused stream's answer; the /train page needs it (a 422 names the
 * setting at fault, a 503 says how many runs are going). read() calls onEvent(name, data) for
 * every event whose data is JSON, in order, and resolves when the stream ends; it rejects with
 * an Error carrying the lab's {parameter, message} and the status when the answer is not 200,
 * or when a stream that opened ends with a `refused` event ({status, detail}) instead.
 * Aborting the signal closes the connection, which is how the server learns the page is gone.
 */
"use strict";

(() => {
  /** One event block (the lines between two blank lines): {name, data} or null for none. */
  function parse(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue; // a comment keeps the line alive
      const at = line.indexOf(":");
      const field = at < 0 ? line : line.slice(0, at);
      const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { name, data: data.join("\n") } : null;
  }

  async function refusal(response) {
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    const detail = body && typeof body.detail === "object" && body.detail ? body.detail : {};
    const err = new Error(detail.message ?? `HTTP ${response.status}`);
    err.parameter = detail.parameter ?? null;
    err.status = response.status;
    return err;
  }

  /** A stream that opened, then could not start its run: the refusal its answer would be. */
  function refused({ status, detail }) {
    const err = new Error(detail.message);
    err.parameter = detail.parameter ?? null;
    err.status = status;
    return err;
  }

  async function read(url, { signal, onEvent }) {
    const response = await fetch(url, { signal, headers: { Accept: "text/event-stream" } });
    if (!response.ok) throw await refusal(response);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value; // the lab ends its lines with \n alone
      let cut = buffer.indexOf("\n\n");
      while (cut >= 0) {
        const found = parse(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (found?.name === "refused") throw refused(JSON.parse(found.data));
        if (found) onEvent(found.name, JSON.parse(found.data));
        cut = buffer.indexOf("\n\n");
      }
    }
  }

  window.NLEvents = { read, parse, refusal };
})();
