import { SHARED_ACROSS_VIEWERS } from '../realtime/shared-across-viewers.js';
import { builder } from './builder.js';

export const AuthorRef = builder.objectRef<{ id: string; name: string }>('Author').implement({
  // Every field resolves the same for every viewer: subscriptions may share its execution.
  extensions: { [SHARED_ACROSS_VIEWERS]: true },
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
  }),
});
