/** A published post's webhook body as the API records it (~330 bytes), for micros whose outbox should look real. */
export function microPostBody(orgId = 'micro'): string {
  return JSON.stringify({
    id: '00000000-0000-4000-8000-000000000000',
    orgId,
    title: 'Micro-benchmark post: a title of an ordinary length',
    tags: ['micro', 'bench'],
    status: 'PUBLISHED',
    publishedAt: new Date().toISOString(),
    author: { id: 'micro-writer', name: 'Micro Writer' },
  });
}
