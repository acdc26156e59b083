// The MongoDB stand-in's speed-ups (README.md, "Speed"): they make a fake database fast and
// change no answer: every answer is still the library's own, and the launcher's fidelity
// shims (Launcher.Limits, IndexConflicts, FailPoint) apply as they do without them. Launcher
// starts these classes unless MONGO_STANDIN_SPEEDUPS=off, which starts the library's own
// collections (Launcher.Faithful*) instead. No new speed-up goes here (README.md, "Rules").
//
// The library answers a filter from the `_id` index only when the filter is exactly one
// equality on `_id`; `{_id: X, status: S, seq: N}` scanned the whole collection, so every
// conditional update slowed down as a collection grew (~3,200/s at 1,000 documents, ~480/s at
// 10,000). MongoDB answers such a filter from the `_id` index and checks the other fields on
// the one document it finds; the IdIndexed* classes below do the same for both backends (the
// memory one of tests and benchmarks, the H2 one of `up` and the fault suite). The same holds
// for an `_id` `$in` list beside other fields (the usage ledger's claim of a batch of ended
// predictions).

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.EmptyIndex;
import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.backend.IndexKey;
import de.bwaldvogel.mongo.backend.KeyValue;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.ValueComparator;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.h2.H2Collection;
import de.bwaldvogel.mongo.backend.h2.H2Database;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.exception.MongoServerError;
import de.bwaldvogel.mongo.wire.bson.BsonEncoder;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.util.AttributeKey;
import java.net.InetSocketAddress;
import org.h2.mvstore.MVMap;
import org.h2.mvstore.MVStore;
import org.h2.mvstore.type.ObjectDataType;
import java.util.concurrent.ConcurrentHashMap;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import java.util.function.IntConsumer;
import java.util.function.Supplier;

final class Speedups {
    private Speedups() {}

    /**
     * How both backends' collections plan a query: when it holds an `_id` equality (or an `_id`
     * `$in` list) beside other fields, `match` checks the whole filter on the documents the `_id`
     * index finds (if any);
     * otherwise `plan` leaves it to the library. The two collections extend different library
     * classes, so each passes its own protected `matchDocuments` and `super.queryDocuments`.
     */
    static <P> QueryResult queryById(List<Index<P>> indexes, Document query,
                                     Function<Iterable<P>, QueryResult> match, Supplier<QueryResult> plan) {
        Object id = query.get("_id");
        // A plain value is an equality, and `{$in: [...]}` a list of them (the `_id` index finds
        // each, as MongoDB's does); any other operator document ($gt, ...) is left to the library.
        boolean inList = id instanceof Document operators && operators.size() == 1 && operators.containsKey("$in");
        if (query.size() < 2 || id == null || (id instanceof Document && !inList)) {
            return plan.get();
        }
        Document byId = new Document("_id", id);
        for (Index<P> index : indexes) {
            if (index.canHandle(byId)) {
                return match.apply(index.getPositions(byId));
            }
        }
        return plan.get();
    }


    /** A memory collection that finds a document by an `_id` equality first, whatever else the filter holds. */
    static final class IdIndexedCollection extends Launcher.FaithfulCollection {
        IdIndexedCollection(MongoDatabase database, String name, CollectionOptions options, CursorRegistry cursors) {
            super(database, name, options, cursors);
        }

        @Override
        protected QueryResult queryDocuments(Document query, Document orderBy, int skip, int limit, int batchSize,
                                             Document fields) {
            return queryById(getIndexes(), query,
                found -> matchDocuments(query, found, orderBy, skip, limit, batchSize, fields),
                () -> super.queryDocuments(query, orderBy, skip, limit, batchSize, fields));
        }
    }

    static final class IdIndexedDatabase extends MemoryDatabase {
        IdIndexedDatabase(String name, CursorRegistry cursors) { super(name, cursors); }

        @Override
        protected MemoryCollection openOrCreateCollection(String name, CollectionOptions options) {
            return new IdIndexedCollection(this, name, options, cursorRegistry);
        }
    }

    static final class IdIndexedBackend extends Launcher.FaithfulBackend {
        @Override
        public MemoryDatabase openOrCreateDatabase(String name) {
            return new IdIndexedDatabase(name, getCursorRegistry());
        }
    }

    /**
     * What a scan of an H2 collection reads instead of its documents: each document's small
     * top-level fields, kept in memory, with the names of the large ones it leaves out.
     *
     * The library's H2 collection answers a filter that no index handles by decoding every
     * document of the file. A prediction of 20 KB took ~120 us to decode, so with 5,000 of them
     * a reconciler's scan took 600 ms, during which the collection (locked for the scan) answered
     * nothing: creates waited behind it, and with a day's 22,000 predictions the sweeps of an idle
     * system kept a core busy. MongoDB answers those filters from its indexes; this does the next
     * best for a stand-in: filters and sorts on the summaries (the fields filters name, such as
     * `status`, `deadline_at`, `usage`, are small), and decodes only the documents that match, up
     * to the limit. A filter that names a left-out field of a document is matched on the whole
     * document, so every answer is the library's own. The summaries are read from the file when
     * a collection opens (GridFS chunks at their first scan, if any), and kept up to date by every
     * insert, update and removal.
     */
    static final class Summaries {
        /** A top-level value larger than this (in characters, roughly bytes) is left out. */
        static final int LARGE = 512;

        record Summary(Document fields, Set<String> leftOut) {}

        private final java.util.concurrent.ConcurrentSkipListMap<Object, Summary> byPosition =
            new java.util.concurrent.ConcurrentSkipListMap<>(ValueComparator.asc());
        private volatile boolean loaded;

        /** The summary of `document`: its small fields (copied), and the names of the others. */
        static Summary of(Document document) {
            Document fields = new Document();
            Set<String> leftOut = new java.util.HashSet<>();
            for (var entry : document.entrySet()) {
                if (size(entry.getValue(), LARGE) > LARGE) {
                    leftOut.add(entry.getKey());
                } else {
                    fields.put(entry.getKey(), entry.getValue());
                }
            }
            return new Summary(fields.cloneDeeply(), leftOut.isEmpty() ? Set.of() : leftOut);
        }

        /** A rough size of `value`, counted only until it passes `bound`. */
        static int size(Object value, int bound) {
            if (value instanceof String text) {
                return text.length();
            }
            if (value instanceof byte[] bytes) {
                return bytes.length;
            }
            if (value instanceof de.bwaldvogel.mongo.bson.BinData binary) {
                return binary.getData().length;
            }
            int total = 8;
            if (value instanceof Document document) {
                for (var entry : document.entrySet()) {
                    total += entry.getKey().length() + size(entry.getValue(), bound - total);
                    if (total > bound) {
                        return total;
                    }
                }
            } else if (value instanceof java.util.Collection<?> items) {
                for (Object item : items) {
                    total += size(item, bound - total);
                    if (total > bound) {
                        return total;
                    }
                }
            }
            return total;
        }

        /**
         * The top-level fields `query` names (of `a.b`, `a`), or null when it holds an operator
         * other than `$and`, `$or` and `$nor` at the top (`$expr`, `$where`, ...): such a filter
         * is matched on whole documents.
         */
        static Set<String> fieldsOf(Document query) {
            Set<String> fields = new java.util.HashSet<>();
            for (var entry : query.entrySet()) {
                String key = entry.getKey();
                if (key.equals("$and") || key.equals("$or") || key.equals("$nor")) {
                    if (!(entry.getValue() instanceof List<?> clauses)) {
                        return null;
                    }
                    for (Object clause : clauses) {
                        Set<String> inner = clause instanceof Document d ? fieldsOf(d) : null;
                        if (inner == null) {
                            return null;
                        }
                        fields.addAll(inner);
                    }
                } else if (key.startsWith("$")) {
                    return null;
                } else {
                    int dot = key.indexOf('.');
                    fields.add(dot < 0 ? key : key.substring(0, dot));
                }
            }
            return fields;
        }

        static boolean covers(Summary summary, Set<String> fields) {
            return summary.leftOut().isEmpty() || java.util.Collections.disjoint(summary.leftOut(), fields);
        }
    }

    /**
     * An equality index over the summaries on the first field of a secondary index the
     * services declared (`status` of `{status: 1, created_at: 1}`), as MongoDB uses an index's
     * prefix: a filter holding an equality (or `$in`) of strings or booleans on that field reads
     * only the summaries of the documents holding one of those values. Without it each of the
     * reconciler's scans read every summary of a day's predictions (~25 ms, the collection held
     * all along), and reads waiting behind them made the day's read p99.
     *
     * Exactness: a document whose value at the path is a string or a boolean is listed under
     * that value; one whose value is anything else (a list, a document, a number, a value left
     * out of its summary) is listed under `other`, which every answer includes; one without the
     * field, or with null there, matches no string or boolean, and is listed nowhere.
     */
    static final class ValueIndex {
        private final List<String> path;
        private final Map<Object, Set<Object>> byValue = new java.util.concurrent.ConcurrentHashMap<>();
        private final Set<Object> other = java.util.concurrent.ConcurrentHashMap.newKeySet();

        ValueIndex(String path) { this.path = List.of(path.split("\\.")); }

        /** The set `summary`'s document is listed in, or null for none. */
        private Set<Object> setOf(Summaries.Summary summary) {
            if (summary.leftOut().contains(path.get(0))) {
                return other;
            }
            Object value = summary.fields();
            for (String field : path) {
                if (!(value instanceof Document document)) {
                    return other;
                }
                value = document.get(field);
                if (value == null) {
                    return null;
                }
            }
            if (value instanceof String || value instanceof Boolean) {
                return byValue.computeIfAbsent(value, v -> java.util.concurrent.ConcurrentHashMap.newKeySet());
            }
            return other;
        }

        void add(Object position, Summaries.Summary summary) {
            Set<Object> set = setOf(summary);
            if (set != null) {
                set.add(position);
            }
        }

        void remove(Object position, Summaries.Summary summary) {
            Set<Object> set = setOf(summary);
            if (set != null) {
                set.remove(position);
            }
        }

        /**
         * The positions that may match the filter value `wanted` of this field (a string or a
         * boolean, `{$eq: v}` or `{$in: [...]}` of them), or null when the index cannot tell.
         */
        Set<Object> candidates(Object wanted) {
            List<?> values;
            if (wanted instanceof String || wanted instanceof Boolean) {
                values = List.of(wanted);
            } else if (wanted instanceof Document operators && operators.size() == 1
                && (operators.get("$in") instanceof List<?> || operators.containsKey("$eq"))) {
                values = operators.get("$in") instanceof List<?> list ? list : java.util.Collections.singletonList(operators.get("$eq"));
            } else {
                return null;
            }
            Set<Object> found = new java.util.HashSet<>(other);
            for (Object value : values) {
                if (!(value instanceof String || value instanceof Boolean)) {
                    return null;
                }
                found.addAll(byValue.getOrDefault(value, Set.of()));
            }
            return found;
        }
    }

    /** The same for the H2 file backend (`up`, the fault suite), which also scans on summaries. */
    static final class IdIndexedH2Collection extends Launcher.FaithfulH2Collection {
        private final Summaries summaries = new Summaries();
        /** The equality indexes over the summaries, by field path. */
        private final Map<String, ValueIndex> valueIndexes = new java.util.concurrent.ConcurrentHashMap<>();
        private final MVMap<Object, Document> data;

        IdIndexedH2Collection(MongoDatabase database, String name, CollectionOptions options,
                              MVMap<Object, Document> data, MVMap<String, Object> meta, CursorRegistry cursors) {
            super(database, name, options, data, meta, cursors);
            this.data = data;
            // Read at open, before the server listens, rather than at the first scan, which would
            // hold the collection (and every command on it) for as long as reading takes: ~200 us
            // a document of 20 KB. A new, empty collection is summarized from its first insert
            // on. GridFS chunks (256 KB each, found by their unique index) are read only if
            // something scans them.
            if (!name.endsWith(".chunks")) {
                if (!data.isEmpty()) {
                    Launcher.progress("reading the summaries of " + getFullName() + " (" + data.size() + " documents)");
                }
                summaries();
            }
        }

        @Override
        protected QueryResult queryDocuments(Document query, Document orderBy, int skip, int limit, int batchSize,
                                             Document fields) {
            return queryById(getIndexes(), query,
                found -> matchDocuments(query, found, orderBy, skip, limit, batchSize, fields),
                () -> super.queryDocuments(query, orderBy, skip, limit, batchSize, fields));
        }

        /** The summaries, read from the file the first time. */
        private java.util.concurrent.ConcurrentSkipListMap<Object, Summaries.Summary> summaries() {
            if (!summaries.loaded) {
                synchronized (summaries) {
                    if (!summaries.loaded) {
                        for (var entry : data.entrySet()) {
                            summaries.byPosition.put(entry.getKey(), Summaries.of(entry.getValue()));
                        }
                        valueIndexes.values().forEach(this::fill);
                        summaries.loaded = true;
                    }
                }
            }
            return summaries.byPosition;
        }

        private void fill(ValueIndex index) {
            summaries.byPosition.forEach(index::add);
        }

        /** Keeps the summary of the document at `position` (null: removed), and its indexes. */
        private void summarize(Object position, Document document) {
            Summaries.Summary now = document == null ? null : Summaries.of(document);
            Summaries.Summary before = now == null
                ? summaries.byPosition.remove(position)
                : summaries.byPosition.put(position, now);
            for (ValueIndex index : valueIndexes.values()) {
                if (before != null) {
                    index.remove(position, before);
                }
                if (now != null) {
                    index.add(position, now);
                }
            }
        }

        /**
         * A filter no index handles: matched on the summaries (on the whole document where a
         * summary leaves out a field the filter names), sorted on them when every matching
         * summary holds the sort's fields, and only the documents of the page decoded.
         */
        @Override
        protected QueryResult matchDocuments(Document query, Document orderBy, int skip, int limit, int batchSize,
                                             Document fieldSelector) {
            Set<String> named = Summaries.fieldsOf(query);
            if (named == null || getIdField() == null) {
                return super.matchDocuments(query, orderBy, skip, limit, batchSize, fieldSelector);
            }
            var all = summaries();
            boolean descending = isNaturalDescending(orderBy);
            // The smallest set of candidates any equality index gives, else every summary.
            Set<Object> candidates = null;
            for (var clause : query.entrySet()) {
                ValueIndex index = valueIndexes.get(clause.getKey());
                Set<Object> some = index == null ? null : index.candidates(clause.getValue());
                if (some != null && (candidates == null || some.size() < candidates.size())) {
                    candidates = some;
                }
            }
            java.util.stream.Stream<Map.Entry<Object, Summaries.Summary>> source;
            if (candidates == null) {
                source = (descending ? all.descendingMap() : all).entrySet().stream();
            } else {
                // In the order of positions, as a scan of every summary would read them.
                source = candidates.stream()
                    .sorted(descending ? ValueComparator.desc() : ValueComparator.asc())
                    .map(position -> {
                        Summaries.Summary summary = all.get(position);
                        return summary == null ? null : Map.entry(position, summary);
                    })
                    .filter(java.util.Objects::nonNull);
            }
            Comparator<Document> order = deriveComparator(orderBy);
            Set<String> sortedOn = order == null ? Set.of() : Summaries.fieldsOf(orderBy);
            java.util.stream.Stream<Map.Entry<Object, Summaries.Summary>> matching = source
                .filter(e -> Summaries.covers(e.getValue(), named)
                    ? documentMatchesQuery(e.getValue().fields(), query)
                    : documentMatchesQuery(getDocument(e.getKey()), query));
            if (order == null) {
                // In natural order a page ends at its limit: no more summaries are read.
                List<Document> page = matching.skip(Math.max(skip, 0))
                    .limit(limit > 0 ? limit : Long.MAX_VALUE)
                    .map(e -> getDocument(e.getKey()))
                    .toList();
                return matchDocumentsFromStream(page.stream(), query, orderBy, 0, 0, batchSize, fieldSelector);
            }
            List<Map.Entry<Object, Summaries.Summary>> matched = matching.toList();
            if (sortedOn == null || !matched.stream().allMatch(e -> Summaries.covers(e.getValue(), sortedOn))) {
                return matchDocumentsFromStream(matched.stream().map(e -> getDocument(e.getKey())), query, orderBy,
                    skip, limit, batchSize, fieldSelector);
            }
            // The sort's values are read from each summary once, then compared as the library's
            // DocumentComparator compares them (reading them at every comparison made a sort of
            // 22,000 summaries take ~300 ms).
            List<String> keys = List.copyOf(orderBy.keySet());
            List<Comparator<Object>> directions = keys.stream()
                .map(k -> (Comparator<Object>) (((Number) orderBy.get(k)).intValue() > 0 ? ValueComparator.asc() : ValueComparator.desc()))
                .toList();
            Comparator<Object[]> byKeys = (a, b) -> {
                for (int i = 0; i < a.length - 1; i++) {
                    int cmp = directions.get(i).compare(a[i], b[i]);
                    if (cmp != 0) {
                        return cmp;
                    }
                }
                return 0;
            };
            List<Document> page = matched.stream()
                .map(e -> {
                    Object[] row = new Object[keys.size() + 1];
                    for (int i = 0; i < keys.size(); i++) {
                        row[i] = de.bwaldvogel.mongo.backend.Utils.getSubdocumentValueCollectionAware(e.getValue().fields(), keys.get(i));
                    }
                    row[keys.size()] = e.getKey();
                    return row;
                })
                .sorted(byKeys)
                .skip(Math.max(skip, 0))
                .limit(limit > 0 ? limit : Long.MAX_VALUE)
                .map(row -> getDocument(row[row.length - 1]))
                .toList();
            // The page is in order already: the library only projects it (no order given).
            return matchDocumentsFromStream(page.stream(), query, null, 0, 0, batchSize, fieldSelector);
        }

        @Override
        protected Object addDocumentInternal(Document document) {
            Object position = super.addDocumentInternal(document);
            if (summaries.loaded) {
                summarize(position, document);
            }
            return position;
        }

        @Override
        protected void handleUpdate(Object position, Document oldDocument, Document newDocument) {
            super.handleUpdate(position, oldDocument, newDocument); // the 16 MiB check, then the library
            if (summaries.loaded) {
                summarize(position, newDocument);
            }
        }

        @Override
        protected void removeDocument(Object position) {
            super.removeDocument(position);
            summarize(position, null);
        }

        /**
         * A secondary (non-unique) index, which the library keeps as an `EmptyIndex` that holds
         * nothing, is added without the library's two passes over every document to fill it:
         * they decoded each document twice per such index at every open of the file (the
         * predictions' eight indexes took 50 of the 70 s that a day's file of 1.2 GB took to
         * open) and filled nothing.
         */
        @Override
        public void addIndex(Index<Object> index) {
            boolean known = getIndexes().stream().anyMatch(i -> i.getName().equals(index.getName()));
            if (index instanceof EmptyIndex && !known) {
                getIndexes().add(index);
                String first = index.getKeys().get(0).getKey();
                if (!valueIndexes.containsKey(first)) {
                    // Listed first, so an insert meanwhile is added by summarize; filled after
                    // (an entry of a document's old value only adds a candidate, never hides one).
                    ValueIndex values = new ValueIndex(first);
                    valueIndexes.put(first, values);
                    if (summaries.loaded) {
                        fill(values);
                    }
                }
                return;
            }
            super.addIndex(index);
        }
    }

    /**
     * Opens its collections as H2Database does (the same map names, so files written before
     * still open). The library's database keeps its store private and opens collections from
     * its own constructor, so the store is the launcher's one, in a static field.
     */
    static final class IdIndexedH2Database extends H2Database {
        IdIndexedH2Database(String name, CursorRegistry cursors) { super(name, Launcher.h2, cursors); }

        @Override
        protected MongoCollection<Object> openOrCreateCollection(String name, CollectionOptions options) {
            String fullName = getFullCollectionNamespace(name);
            Launcher.progress("opening collection " + fullName);
            MVMap<Object, Document> data = Launcher.h2.openMap("databases." + fullName);
            MVMap<String, Object> meta = Launcher.h2.openMap("meta." + fullName);
            return new IdIndexedH2Collection(this, name, options, data, meta, cursorRegistry);
        }

        @Override
        protected Index<Object> openOrCreateUniqueIndex(String collection, String name, List<IndexKey> keys, boolean sparse) {
            Launcher.progress("opening index " + getDatabaseName() + "." + collection + "." + name);
            // Opened here first with its keys in KeyOrder: the library's own open (the same name,
            // as the library names it) then finds the map open and keeps it.
            if (KeyOrder.ON) {
                Launcher.h2.openMap(getFullCollectionNamespace(collection) + "._index_" + name,
                    new MVMap.Builder<KeyValue, Object>().keyType(new KeyOrder()));
            }
            return super.openOrCreateUniqueIndex(collection, name, keys, sparse);
        }
    }

    /**
     * The order of a unique index's keys on the H2 file, as H2 orders them, at a fraction of the
     * cost. H2 has no type for the library's keys (`KeyValue`) and orders them by their Java
     * serialization, serializing both keys anew at every comparison of a look-up: under the
     * day's load (deploy/testing/bench/soak) that was a quarter of everything the stand-in allocated
     * (4.2 of 16 GB in 100 s; an insert looks its `_id` up twice, an update once), and the
     * young collections it caused paused every command. A key of strings only (every `_id` and
     * unique key the services write) is serialized once and its bytes kept, by value (equal
     * keys of strings serialize alike), and compared as H2 compares them; any other key is
     * left to H2. The order, and the bytes on the file, are H2's own.
     */
    static final class KeyOrder extends ObjectDataType {
        /**
         * Off with `MONGO_STANDIN_KEY_ORDER=h2` (H2's own comparisons): for the test that holds
         * a file written either way to the other's look-ups.
         */
        static final boolean ON = !"h2".equals(System.getenv("MONGO_STANDIN_KEY_ORDER"));
        /** Kept serializations, forgotten all at once past this many (~25 MB of keys). */
        private static final int MAX_KEPT = 100_000;
        private static final ConcurrentHashMap<KeyValue, byte[]> SERIALIZED = new ConcurrentHashMap<>();

        @Override
        public int compare(Object a, Object b) {
            if (a != b && a instanceof KeyValue x && b instanceof KeyValue y && ofStrings(x) && ofStrings(y)) {
                return ObjectDataType.compareNotNull(serialized(x), serialized(y));
            }
            return super.compare(a, b);
        }

        private static boolean ofStrings(KeyValue key) {
            for (Object value : key) {
                if (!(value instanceof String)) {
                    return false;
                }
            }
            return true;
        }

        private static byte[] serialized(KeyValue key) {
            byte[] bytes = SERIALIZED.get(key);
            if (bytes == null) {
                if (SERIALIZED.size() >= MAX_KEPT) {
                    SERIALIZED.clear();
                }
                bytes = ObjectDataType.serialize(key);
                SERIALIZED.put(key, bytes);
            }
            return bytes;
        }
    }

    static final class IdIndexedH2Backend extends Launcher.FaithfulH2Backend {
        IdIndexedH2Backend(MVStore store) { super(store); }

        @Override
        protected MongoDatabase openOrCreateDatabase(String name) {
            return new IdIndexedH2Database(name, getCursorRegistry());
        }
    }


}
