import type { Viewer } from '@herald/auth';
import { builder } from './builder.js';

/** The signed-in user, as their token describes them. */
export const UserRef = builder.objectRef<Viewer>('User').implement({
  description: 'The signed-in user, as described by their token.',
  fields: (t) => ({
    id: t.exposeID('id'),
    name: t.exposeString('name'),
    orgs: t.exposeIDList('orgs', { description: 'Organisations the user belongs to.' }),
  }),
});

builder.queryField('me', (t) =>
  t.field({
    type: UserRef,
    nullable: true,
    description: 'The current user; null when the request carries no token.',
    resolve: (_root, _args, context) => context.viewer,
  }),
);
