import { builder } from './builder.js';

export const CreatePostInput = builder.inputType('CreatePostInput', {
  fields: (t) => ({
    orgId: t.id({ required: true }),
    title: t.string({ required: true }),
    tags: t.stringList({ required: false }),
  }),
});
