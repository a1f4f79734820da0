// Package openapi turns an OpenAPI 3.0 or 3.1 description of a legacy
// REST API into Tier B endpoint documents (docs/configuration.md,
// "Tier B endpoint"; RCNS §7): one reviewable YAML document per
// operation, checked by the same schema and loader as a hand-written
// one. It backs `caddy rcns import-openapi` (docs/recipes.md, "Starting
// from OpenAPI").
//
// Import reads the document (YAML or JSON, at most MaxDocumentBytes),
// resolves its local $refs (including the $id and $anchor references of
// OpenAPI 3.1 schemas), refuses external and cyclic ones, validates it
// with github.com/getkin/kin-openapi, and translates each selected
// operation:
//
//   - the HTTP method becomes an AGTP method (GET→FETCH, POST→CREATE, …; QUERY
//     for a search with Options.QueryForSearch, or a map entry), and the
//     path an AGTP path template, with a proposed rename for a segment
//     equal to a method name (RCNS §6) that must be accepted;
//   - path and query parameters and the JSON request body become the
//     properties of a closed input_schema, with the query and body
//     mappings that send them upstream;
//   - the success response's schema becomes output_schema, its declared
//     4xx responses the error_map;
//   - Schema Objects are translated to JSON Schema 2020-12 (OpenAPI 3.0
//     nullable, exclusive bounds, example and discriminator included),
//     and whatever cannot be carried over faithfully is a review note
//     in the document, never dropped silently;
//   - security schemes become upstream headers reading their secrets
//     from environment variables (${NAME}), never a literal secret.
//
// The output depends only on the document and the Options: the same
// input gives the same bytes (document order, no time stamps). WriteDir
// writes the documents into a folder all at once, or not at all.
//
// The package imports no caddy: it uses policy (the method catalog and
// path grammar), recipes/schema and recipes (the endpoint schema and
// loader) to check what it writes.
package openapi
