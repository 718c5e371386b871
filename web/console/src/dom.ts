// A tiny DOM builder: the console's components are functions that return
// elements. Text is always set as text, never parsed as HTML.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | null | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG = "http://www.w3.org/2000/svg";

export function s(tag: string, attrs: Attrs = {}, ...children: (Child | Child[])[]): SVGElement {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el: Element, attrs: Attrs): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") {
      el.addEventListener(k.replace(/^on/, "").toLowerCase(), v);
    } else if (v === true) {
      el.setAttribute(k, "");
    } else {
      el.setAttribute(k, String(v));
    }
  }
}

export function append(el: Node, children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

// replace empties el and puts children in it.
export function replace(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

let fields = 0;

// field is a form control with its visible label (tied by id, so the
// control's name is the label's text alone).
export function field(text: string, control: HTMLElement): HTMLElement {
  if (!control.id) control.id = `f${++fields}`;
  return h("div", { class: "field" }, h("label", { for: control.id }, text), control);
}

// short renders an enum value without its prefix: RUN_STATE_SUCCEEDED →
// succeeded.
export function short(v: string | undefined, prefix: string): string {
  return (v ?? "").replace(prefix, "").toLowerCase().replace(/_/g, " ");
}

export function when(t: string | undefined): string {
  return t ? new Date(t).toLocaleString() : "";
}
