/** Reads a container's output stream to its end as UTF-8 text, keeping at most `limit` bytes and draining the rest. */
export async function readBoundedText(stream: NodeJS.ReadableStream, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
    if (size < limit) chunks.push(buf.subarray(0, limit - size));
    size += buf.length;
  }
  return Buffer.concat(chunks).toString("utf8");
}
