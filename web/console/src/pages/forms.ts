// A form built from a list of fields, for pages whose work is "fill in,
// call the API, show what came back": documents, history, reviews. A new
// kind of thing is a field list and one call, not a new page's plumbing.
import { h, field } from "../dom";
import { errorText, statusLine } from "./common";

export interface FieldSpec {
  // name is the key of the value handed to the action.
  name: string;
  label: string;
  kind?: "text" | "search" | "textarea" | "select" | "number" | "password";
  options?: [value: string, label: string][];
  required?: boolean;
  placeholder?: string;
  value?: string;
}

export type Values = Record<string, string>;

// actionForm is a form of fields whose submit calls act with the values;
// progress and errors go to status. act's answer, when a string, is shown
// there too.
export function actionForm(
  label: string,
  fields: FieldSpec[],
  button: string,
  status: ReturnType<typeof statusLine>,
  act: (v: Values) => Promise<string | void>,
): HTMLFormElement {
  const controls = fields.map(control);
  const form = h("form", { class: "inline", "aria-label": label }, controls.map((c, i) => field(fields[i]!.label, c)), h("button", { type: "submit" }, button));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v: Values = {};
    fields.forEach((f, i) => (v[f.name] = (controls[i] as HTMLInputElement).value.trim()));
    status.show(`${button}…`);
    try {
      status.show((await act(v)) || "Done.");
    } catch (err) {
      status.show(errorText(err), "error");
    }
  });
  return form;
}

function control(f: FieldSpec): HTMLElement {
  const common = { name: f.name, required: f.required ?? false, placeholder: f.placeholder ?? null };
  switch (f.kind) {
    case "textarea":
      return h("textarea", { ...common, rows: 6 }, f.value ?? "");
    case "select":
      return h("select", { name: f.name }, (f.options ?? []).map(([v, l]) => h("option", { value: v, selected: v === f.value }, l)));
    default:
      return h("input", { ...common, type: f.kind ?? "text", value: f.value ?? "" });
  }
}

// listOf fills el with one item per x, or says empty when there are none.
export function listOf<T>(el: HTMLElement, xs: T[] | undefined, item: (x: T) => HTMLElement, empty: string): void {
  el.replaceChildren(...(xs?.length ? xs.map(item) : [h("li", { class: "muted" }, empty)]));
}
