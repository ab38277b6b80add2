/**
 * A small line chart rendered to PNG with `pngjs` (pure JavaScript): axes with "nice" ticks,
 * step or straight lines, a legend and a title in the 5×7 font of font.ts. Enough to show Ready
 * count over time for two operators, nothing more.
 *
 * @module
 */
import { PNG } from "pngjs";
import { GLYPH_HEIGHT, GLYPH_WIDTH, glyphPixel, textWidth } from "./font.ts";

/** An RGB colour. */
export type Rgb = [number, number, number];

/** One line of the chart. */
export interface Series {
  name: string;
  color: Rgb;
  /** (x, y) points, x ascending. */
  points: [number, number][];
  /** Draw as a step function (hold y until the next x); default true. */
  step?: boolean;
}

/** What to draw. */
export interface ChartSpec {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  width?: number;
  height?: number;
}

/** "Nice" tick step (1, 2 or 5 × 10^k) giving about `target` ticks over `span`. */
export function niceStep(span: number, target = 6): number {
  if (!(span > 0)) return 1;
  const raw = span / target;
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/** Formats a tick value without floating-point noise. */
function tickLabel(v: number, step: number): string {
  const decimals = Math.max(0, -Math.floor(Math.log10(step)));
  return v.toFixed(decimals);
}

class Canvas {
  readonly png: PNG;
  constructor(readonly w: number, readonly h: number) {
    this.png = new PNG({ width: w, height: h });
    this.png.data.fill(255);
  }
  set(x: number, y: number, c: Rgb): void {
    x = Math.round(x);
    y = Math.round(y);
    if (x < 0 || y < 0 || x >= this.w || y >= this.h) return;
    const i = (y * this.w + x) * 4;
    this.png.data[i] = c[0];
    this.png.data[i + 1] = c[1];
    this.png.data[i + 2] = c[2];
    this.png.data[i + 3] = 255;
  }
  rect(x: number, y: number, w: number, h: number, c: Rgb): void {
    for (let dy = 0; dy < h; dy++) for (let dx = 0; dx < w; dx++) this.set(x + dx, y + dy, c);
  }
  /** Line of `thick` pixels (Bresenham with a square pen). */
  line(x0: number, y0: number, x1: number, y1: number, c: Rgb, thick = 1): void {
    x0 = Math.round(x0);
    y0 = Math.round(y0);
    x1 = Math.round(x1);
    y1 = Math.round(y1);
    const dx = Math.abs(x1 - x0), dy = -Math.abs(y1 - y0);
    const sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    let err = dx + dy;
    const off = Math.floor((thick - 1) / 2);
    for (let i = 0; i < 100_000; i++) {
      this.rect(x0 - off, y0 - off, thick, thick, c);
      if (x0 === x1 && y0 === y1) break;
      const e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }
  text(s: string, x: number, y: number, c: Rgb, scale = 2): void {
    for (let i = 0; i < s.length; i++) {
      for (let gx = 0; gx < GLYPH_WIDTH; gx++) {
        for (let gy = 0; gy < GLYPH_HEIGHT; gy++) {
          if (glyphPixel(s[i], gx, gy)) {
            this.rect(x + (i * (GLYPH_WIDTH + 1) + gx) * scale, y + gy * scale, scale, scale, c);
          }
        }
      }
    }
  }
  /** Text rotated 90° counter-clockwise, starting at (x, y) going up. */
  textUp(s: string, x: number, y: number, c: Rgb, scale = 2): void {
    for (let i = 0; i < s.length; i++) {
      for (let gx = 0; gx < GLYPH_WIDTH; gx++) {
        for (let gy = 0; gy < GLYPH_HEIGHT; gy++) {
          if (glyphPixel(s[i], gx, gy)) {
            this.rect(
              x + gy * scale,
              y - (i * (GLYPH_WIDTH + 1) + gx + 1) * scale,
              scale,
              scale,
              c,
            );
          }
        }
      }
    }
  }
}

const BLACK: Rgb = [0, 0, 0];
const GRID: Rgb = [225, 225, 225];
const GREY: Rgb = [90, 90, 90];

/** Renders the chart; returns PNG bytes. */
export function renderChart(spec: ChartSpec): Uint8Array {
  const W = spec.width ?? 960, H = spec.height ?? 560;
  const cv = new Canvas(W, H);
  const left = 90, right = 30, top = 60, bottom = 70;
  const pw = W - left - right, ph = H - top - bottom;
  const all = spec.series.flatMap((s) => s.points);
  const xMax = Math.max(1e-9, ...all.map((p) => p[0]));
  const yMax = Math.max(1, ...all.map((p) => p[1]));
  const xStep = niceStep(xMax), yStep = niceStep(yMax);
  const xTop = Math.ceil(xMax / xStep) * xStep, yTop = Math.ceil(yMax / yStep) * yStep;
  const X = (v: number) => left + (v / xTop) * pw;
  const Y = (v: number) => top + ph - (v / yTop) * ph;

  // Grid, ticks and labels.
  for (let i = 0; i <= Math.round(xTop / xStep); i++) {
    const v = i * xStep, x = X(v);
    cv.line(x, top, x, top + ph, GRID);
    cv.line(x, top + ph, x, top + ph + 5, BLACK);
    const t = tickLabel(v, xStep);
    cv.text(t, x - textWidth(t, 2) / 2, top + ph + 10, GREY);
  }
  for (let i = 0; i <= Math.round(yTop / yStep); i++) {
    const v = i * yStep, y = Y(v);
    cv.line(left, y, left + pw, y, GRID);
    cv.line(left - 5, y, left, y, BLACK);
    const t = tickLabel(v, yStep);
    cv.text(t, left - 10 - textWidth(t, 2), y - GLYPH_HEIGHT, GREY);
  }
  cv.line(left, top, left, top + ph, BLACK, 2);
  cv.line(left, top + ph, left + pw, top + ph, BLACK, 2);
  cv.text(spec.title, (W - textWidth(spec.title, 3)) / 2, 15, BLACK, 3);
  cv.text(spec.xLabel, left + (pw - textWidth(spec.xLabel, 2)) / 2, H - 30, BLACK);
  cv.textUp(spec.yLabel, 15, top + (ph + textWidth(spec.yLabel, 2)) / 2, BLACK);

  // Series.
  for (const s of spec.series) {
    const pts = s.points;
    for (let i = 1; i < pts.length; i++) {
      const [x0, y0] = pts[i - 1], [x1, y1] = pts[i];
      if (s.step ?? true) {
        cv.line(X(x0), Y(y0), X(x1), Y(y0), s.color, 3);
        cv.line(X(x1), Y(y0), X(x1), Y(y1), s.color, 3);
      } else {
        cv.line(X(x0), Y(y0), X(x1), Y(y1), s.color, 3);
      }
    }
  }

  // Legend (top left of the plot area, where rising curves leave room).
  let ly = top + 12;
  for (const s of spec.series) {
    const tw = textWidth(s.name, 2);
    const lx = left + 16;
    cv.rect(lx - 6, ly - 4, tw + 50, 22, [255, 255, 255]);
    cv.line(lx, ly + 7, lx + 30, ly + 7, s.color, 3);
    cv.text(s.name, lx + 38, ly, BLACK);
    ly += 24;
  }
  return new Uint8Array(PNG.sync.write(cv.png));
}
