// A session's live events as server-sent events. EventSource cannot send
// the key header, so the stream is read with fetch; on a dropped
// connection it resumes after the last event seen (Last-Event-ID).
import { headers, url, type Schemas } from "./api";

export type SylkEvent = Schemas["v1Event"];

export interface Stream {
  close(): void;
}

export function streamEvents(
  session: string,
  onEvent: (e: SylkEvent) => void,
  onState: (state: "open" | "retrying" | "error", detail?: string) => void,
): Stream {
  const abort = new AbortController();
  let last = "";
  let stopped = false;
  const run = async () => {
    let delay = 500;
    while (!stopped) {
      try {
        const h = headers();
        h.set("Accept", "text/event-stream");
        if (last) h.set("Last-Event-ID", last);
        const resp = await fetch(url(`v1/${session}/events:stream`), { headers: h, signal: abort.signal });
        if (!resp.ok || !resp.body) {
          const body = await resp.text();
          onState("error", parseMessage(body) || `HTTP ${resp.status}`);
          if (resp.status >= 400 && resp.status < 500) return;
        } else {
          onState("open");
          delay = 500;
          await read(resp.body, (id, type, data) => {
            if (id) last = id;
            if (type === "error") onState("error", parseMessage(data));
            else onEvent(JSON.parse(data) as SylkEvent);
          });
        }
      } catch (err) {
        if (stopped) return;
        onState("retrying", String(err));
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10_000);
    }
  };
  void run();
  return {
    close() {
      stopped = true;
      abort.abort();
    },
  };
}

function parseMessage(body: string): string {
  try {
    return (JSON.parse(body) as { message?: string }).message ?? body;
  } catch {
    return body;
  }
}

// read parses the text/event-stream framing: fields up to a blank line.
async function read(
  body: ReadableStream<Uint8Array>,
  dispatch: (id: string, type: string, data: string) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let id = "";
  let type = "";
  let data: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length) dispatch(id, type, data.join("\n"));
        type = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "id") id = val;
      else if (field === "event") type = val;
      else if (field === "data") data.push(val);
    }
  }
}
