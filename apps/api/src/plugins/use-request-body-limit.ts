import { createGraphQLError, type Plugin } from 'graphql-yoga';

/** The refusal Yoga's own `maxRequestBodySize` gives (HTTP 413, REQUEST_ENTITY_TOO_LARGE). */
function bodyTooLarge() {
  return createGraphQLError('Request body too large', {
    extensions: { http: { status: 413 }, code: 'REQUEST_ENTITY_TOO_LARGE' },
  });
}

/** Only one non-negative integer is a valid Content-Length (as Yoga checks it). */
const CONTENT_LENGTH = /^\d+$/;

/**
 * The request body limit (MAX_REQUEST_BODY_BYTES), HTTP 413 past it, as Yoga's `maxRequestBodySize`
 * does, without its per-request cost when the length is declared.
 *
 * Yoga pipes every body through a byte-counting TransformStream, even when `Content-Length` already
 * says how long it is: a stream pipeline per request (an AbortController, a DOMException with its
 * stack at the end, several promises), ~10 % of a `me` request's CPU. node:http's parser delivers
 * exactly `Content-Length` bytes and refuses a request that declares both a length and chunked
 * transfer (request smuggling), so with a declared length the header check suffices. A body without
 * one (chunked) is still counted chunk by chunk and refused once it passes the limit, as before.
 * Register it after the request parsers (in `plugins`, with Yoga's own limit turned off).
 */
export function useRequestBodyLimit(limit: number): Plugin {
  return {
    onRequestParse({ request, requestParser, setRequestParser, fetchAPI }) {
      const contentLength = request.headers.get('content-length');
      if (contentLength != null) {
        if (!CONTENT_LENGTH.test(contentLength)) {
          throw createGraphQLError('Content-Length header is invalid.', {
            extensions: { http: { status: 400 }, code: 'BAD_REQUEST' },
          });
        }
        if (Number(contentLength) > limit) throw bodyTooLarge();
        return;
      }
      if (requestParser == null || request.body == null) return;
      const parse = requestParser;
      setRequestParser((unlimited) => parse(countingBody(unlimited, limit, fetchAPI)));
    },
  };
}

/** `request` whose body errors with 413 once more than `limit` bytes have been read (Yoga's own way). */
function countingBody(
  request: Request,
  limit: number,
  fetchAPI: { Request: typeof Request; TransformStream: typeof TransformStream },
): Request {
  // whatwg-node's Request has its own ReadableStream, which pipes only into its own TransformStream.
  const Transform = request.body instanceof ReadableStream ? TransformStream : fetchAPI.TransformStream;
  let bytesRead = 0;
  const body = request.body!.pipeThrough(
    new Transform<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        bytesRead += chunk.byteLength;
        if (bytesRead > limit) {
          controller.error(bodyTooLarge());
          return;
        }
        controller.enqueue(chunk);
      },
    }),
  );
  return new fetchAPI.Request(request.url, {
    method: request.method,
    headers: request.headers,
    signal: request.signal,
    body,
    // @ts-expect-error `duplex` is missing from the DOM typings
    duplex: 'half',
  });
}
