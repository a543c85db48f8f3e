// A small terminal interpreter for the output pane: enough of what
// commands print (SGR colours and attributes, carriage return, backspace,
// tab, erase in line, clear screen, cursor moves within the screen) to show
// progress bars, coloured test output and simple full-screen programs
// faithfully; other escape sequences are consumed and ignored, never shown.
"use strict";

const ANSI_PALETTE = ["#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
  "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"];

function ansi256(n) {
  if (n < 16) return ANSI_PALETTE[n];
  if (n >= 232) { const v = 8 + (n - 232) * 10; return `rgb(${v},${v},${v})`; }
  n -= 16;
  const c = [Math.floor(n / 36), Math.floor(n / 6) % 6, n % 6].map(v => v ? v * 40 + 55 : 0);
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

class AnsiScreen {
  constructor(maxLines) {
    this.maxLines = maxLines || 5000;
    this.reset();
  }

  reset() {
    this.lines = [[]]; // each line: array of [char, styleKey]
    this.row = 0;
    this.col = 0;
    this.style = {};
    this.styleKey = "";
    this.state = "text"; // text | esc | csi | osc | oscEsc
    this.params = "";
    this.decoder = new TextDecoder("utf-8");
    this.dropped = 0;
  }

  // write interprets bytes (a Uint8Array).
  write(bytes) { this.writeText(this.decoder.decode(bytes, { stream: true })); }

  // marker adds a line of its own (a gap in the output), styled apart.
  marker(text) {
    if (this.lines[this.row].length) this.newline();
    this.lines[this.row] = [...text].map(ch => [ch, "omitted"]);
    this.newline();
  }

  writeText(s) {
    for (const ch of s) {
      switch (this.state) {
        case "text": this.text(ch); break;
        case "esc":
          if (ch === "[") { this.state = "csi"; this.params = ""; }
          else if (ch === "]") this.state = "osc";
          else this.state = "text"; // a two-byte sequence: ignored
          break;
        case "csi":
          if (ch >= "@" && ch <= "~") { this.csi(ch, this.params); this.state = "text"; }
          else this.params += ch;
          break;
        case "osc":
          if (ch === "\x07") this.state = "text";
          else if (ch === "\x1b") this.state = "oscEsc";
          break;
        case "oscEsc": this.state = ch === "\\" ? "text" : "osc"; break;
      }
    }
  }

  text(ch) {
    switch (ch) {
      case "\x1b": this.state = "esc"; return;
      case "\n": this.newline(); return;
      case "\r": this.col = 0; return;
      case "\b": this.col = Math.max(0, this.col - 1); return;
      case "\t": this.col = (Math.floor(this.col / 8) + 1) * 8; return;
      case "\x07": return;
    }
    if (ch < " ") return;
    const line = this.lines[this.row];
    while (line.length < this.col) line.push([" ", ""]);
    line[this.col] = [ch, this.styleKey];
    this.col++;
  }

  newline() {
    this.row++;
    this.col = 0;
    if (this.row >= this.lines.length) this.lines.push([]);
    if (this.lines.length > this.maxLines) {
      const cut = this.lines.length - this.maxLines;
      this.lines.splice(0, cut);
      this.row -= cut;
      this.dropped += cut;
    }
  }

  // screenTop is the first line of the last 24-line "screen", where
  // absolute cursor positions land.
  screenTop() { return Math.max(0, this.lines.length - 24); }

  moveTo(row, col) {
    this.row = Math.max(0, row);
    while (this.lines.length <= this.row) this.lines.push([]);
    this.col = Math.max(0, col);
  }

  csi(final, params) {
    if (params.startsWith("?")) return; // private modes: cursor, alternate screen
    const p = params.split(";").map(v => parseInt(v, 10));
    const n = (i, d) => (Number.isNaN(p[i]) || p[i] === undefined ? d : p[i]);
    switch (final) {
      case "m": this.sgr(p); break;
      case "K": {
        const line = this.lines[this.row];
        const mode = n(0, 0);
        if (mode === 0) line.length = Math.min(line.length, this.col);
        else if (mode === 1) for (let i = 0; i < Math.min(this.col, line.length); i++) line[i] = [" ", ""];
        else line.length = 0;
        break;
      }
      case "J":
        if (n(0, 0) >= 2) { this.lines.push([]); this.moveTo(this.lines.length - 1, 0); }
        break;
      case "A": this.moveTo(Math.max(this.screenTop(), this.row - n(0, 1)), this.col); break;
      case "B": this.moveTo(this.row + n(0, 1), this.col); break;
      case "C": this.col += n(0, 1); break;
      case "D": this.col = Math.max(0, this.col - n(0, 1)); break;
      case "G": this.col = n(0, 1) - 1; break;
      case "H": case "f": this.moveTo(this.screenTop() + n(0, 1) - 1, n(1, 1) - 1); break;
    }
  }

  sgr(p) {
    if (p.length === 0 || (p.length === 1 && Number.isNaN(p[0]))) p = [0];
    const st = this.style;
    for (let i = 0; i < p.length; i++) {
      const v = Number.isNaN(p[i]) ? 0 : p[i];
      if (v === 0) { for (const k in st) delete st[k]; }
      else if (v === 1) st.b = true;
      else if (v === 2) st.dim = true;
      else if (v === 3) st.i = true;
      else if (v === 4) st.u = true;
      else if (v === 7) st.inv = true;
      else if (v === 22) { delete st.b; delete st.dim; }
      else if (v === 23) delete st.i;
      else if (v === 24) delete st.u;
      else if (v === 27) delete st.inv;
      else if (v >= 30 && v <= 37) st.fg = ANSI_PALETTE[v - 30];
      else if (v >= 90 && v <= 97) st.fg = ANSI_PALETTE[v - 90 + 8];
      else if (v === 39) delete st.fg;
      else if (v >= 40 && v <= 47) st.bg = ANSI_PALETTE[v - 40];
      else if (v >= 100 && v <= 107) st.bg = ANSI_PALETTE[v - 100 + 8];
      else if (v === 49) delete st.bg;
      else if ((v === 38 || v === 48) && p[i + 1] === 5) { st[v === 38 ? "fg" : "bg"] = ansi256(p[i + 2] || 0); i += 2; }
      else if ((v === 38 || v === 48) && p[i + 1] === 2) { st[v === 38 ? "fg" : "bg"] = `rgb(${p[i + 2] || 0},${p[i + 3] || 0},${p[i + 4] || 0})`; i += 4; }
    }
    this.styleKey = JSON.stringify(st) === "{}" ? "" : JSON.stringify(st);
  }

  // render fills el with the screen's lines as text nodes and spans (no
  // HTML is ever parsed from the output).
  render(el) {
    const frag = document.createDocumentFragment();
    if (this.dropped) {
      const s = document.createElement("span");
      s.className = "omitted";
      s.textContent = `… ${this.dropped} earlier lines not shown here …\n`;
      frag.appendChild(s);
    }
    let last = this.lines.length;
    while (last > 1 && this.lines[last - 1].length === 0 && last - 1 > this.row) last--;
    for (let r = 0; r < last; r++) {
      const line = this.lines[r];
      let i = 0;
      while (i < line.length) {
        const key = line[i][1];
        let text = "";
        while (i < line.length && line[i][1] === key) text += line[i++][0];
        frag.appendChild(this.span(key, text));
      }
      if (r < last - 1) frag.appendChild(document.createTextNode("\n"));
    }
    el.replaceChildren(frag);
  }

  span(key, text) {
    if (!key) return document.createTextNode(text);
    const s = document.createElement("span");
    s.textContent = text;
    if (key === "omitted") { s.className = "omitted"; return s; }
    const st = JSON.parse(key);
    const cls = ["b", "dim", "i", "u"].filter(k => st[k]);
    if (cls.length) s.className = cls.join(" ");
    const fg = st.inv ? (st.bg || "#111827") : st.fg;
    const bg = st.inv ? (st.fg || "#e5e7eb") : st.bg;
    if (fg) s.style.color = fg;
    if (bg) s.style.backgroundColor = bg;
    return s;
  }
}

window.AnsiScreen = AnsiScreen;
