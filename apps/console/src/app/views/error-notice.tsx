import type { GraphQLRequestError } from '../graphql.js';

/** An API error as the operator should read it: what happened and its code. */
export function ErrorNotice({ error }: { error: GraphQLRequestError | Error }) {
  const code = 'code' in error ? error.code : undefined;
  return (
    <p class="notice error" role="alert">
      {error.message}
      {code && <code>{code}</code>}
    </p>
  );
}
