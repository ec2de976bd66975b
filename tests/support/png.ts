import { inflateSync } from "node:zlib";

/** A decoded 8-bit PNG: RGBA pixels, row by row. */
export interface Png {
  width: number;
  height: number;
  rgba: Uint8Array;
}

/**
 * A tiny PNG reader for screenshots (8-bit greyscale, RGB or RGBA, with or without alpha, not
 * interlaced): enough to look at what headless Chromium rendered without a dependency.
 */
export function decodePng(buf: Buffer): Png {
  if (buf.subarray(0, 8).toString("hex") !== "89504e470d0a1a0a") throw new Error("not a PNG");
  let off = 8;
  let width = 0;
  let height = 0;
  let colorType = 0;
  const idat: Buffer[] = [];
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString("latin1", off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const depth = data[8];
      colorType = data[9]!;
      if (depth !== 8 || data[12] !== 0 || ![0, 2, 4, 6].includes(colorType)) throw new Error(`unsupported PNG (depth ${depth}, colour type ${colorType}, interlace ${data[12]})`);
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
    off += 12 + len;
  }
  const channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[colorType as 0 | 2 | 4 | 6];
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = new Uint8Array(width * height * 4);
  let prev = new Uint8Array(stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const cur = new Uint8Array(stride);
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? cur[i - channels]! : 0;
      const b = prev[i]!;
      const c = i >= channels ? prev[i - channels]! : 0;
      let v = line[i]!;
      if (filter === 1) v += a;
      else if (filter === 2) v += b;
      else if (filter === 3) v += (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[i] = v & 0xff;
    }
    for (let x = 0; x < width; x++) {
      const s = x * channels;
      const d = (y * width + x) * 4;
      const grey = channels <= 2;
      out[d] = cur[s]!;
      out[d + 1] = grey ? cur[s]! : cur[s + 1]!;
      out[d + 2] = grey ? cur[s]! : cur[s + 2]!;
      out[d + 3] = channels === 4 ? cur[s + 3]! : channels === 2 ? cur[s + 1]! : 255;
    }
    prev = cur;
  }
  return { width, height, rgba: out };
}

/** How many pixels have exactly this colour ("#RRGGBB"). */
export function countColour(png: Png, hex: string): number {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  let n = 0;
  for (let i = 0; i < png.rgba.length; i += 4) if (png.rgba[i] === r && png.rgba[i + 1] === g && png.rgba[i + 2] === b) n++;
  return n;
}
