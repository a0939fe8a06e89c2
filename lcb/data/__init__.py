"""Data: LiveCodeBench rows from the hub, local files or the bundled sample set, decoded into
`Problem`s (`problems`), filtered and streamed (`datasets`), and the frozen eval IDs (`manifest`).
The bundled sample rows and reference solutions live in `sample/`."""
