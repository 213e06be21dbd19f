import type { IncomingMessage } from 'node:http';

/** The request body is larger than the receiver accepts; answered with HTTP 413. */
export class PayloadTooLargeError extends Error {
  override readonly name = 'PayloadTooLargeError';
  readonly code = 'PAYLOAD_TOO_LARGE';

  constructor(readonly limitBytes: number) {
    super(`the request body is larger than ${limitBytes} bytes`);
  }
}

/**
 * Reads a request body into one buffer, untouched (the signature covers these exact bytes).
 * A `Content-Length` above the limit is refused before reading anything; a body without one
 * (chunked) is refused as soon as it passes the limit. Either way the rest of the body is left
 * unread: the caller answers 413 with `Connection: close`, and node:http discards what follows.
 *
 * @throws PayloadTooLargeError past `maxBytes`.
 * @throws Error when the client aborts or the connection fails before the body ends.
 */
export function readRawBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new PayloadTooLargeError(maxBytes));

  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let receivedBytes = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      receivedBytes += chunk.length;
      if (receivedBytes > maxBytes) {
        cleanup();
        req.pause();
        reject(new PayloadTooLargeError(maxBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, receivedBytes));
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    const onClose = () => {
      cleanup();
      reject(new Error('the client closed the connection before the body ended'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}
