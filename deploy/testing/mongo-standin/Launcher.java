// Starts mongo-java-server, the MongoDB wire-protocol stand-in used for local runs and CI.
//
//   java -cp '<classes>:lib/*' Launcher [--host H] [--port P] [--h2 FILE] [--exit-on-stdin-eof]
//
// deploy/local/install compiles it into <classes> (a directory per version of this source) and
// puts that on the stand-in's classpath; `java ... Launcher.java` runs the source as well, but
// compiles it at every start.
// --port 0 (the default) binds a free port. Once listening it prints one line
// "LISTENING mongodb://HOST:PORT" on stdout, so a caller never races for a port.
// --h2 FILE keeps data in an H2 file that survives restarts; without it data lives in memory.
// Opening a file reads the summaries of its documents into memory (see Summaries), which takes
// time and memory in proportion to the data: the launcher prints "OPENING FILE BYTES", then
// "PROGRESS ..." as it opens each collection, so a caller can wait for progress rather than for
// a fixed time. A file whose live data fills less than half of it (after retention removed
// much) is compacted first ("PROGRESS compacting ..."), and a stop compacts it for up to 10 s,
// so the file stays bounded by what is kept.
// --exit-on-stdin-eof stops the server when its stdin closes: a test harness that starts it
// through a pipe cannot leave it running, even when the harness itself is killed.
//
// The library's own versions top out at wire version 8 and the Rust driver 3.x needs at least 9,
// so the backend declares MongoDB 6.0 (wire version 17).
//
// The library answers a filter from the `_id` index only when the filter is exactly one
// equality on `_id`; `{_id: X, status: S, seq: N}` scanned the whole collection, so every
// conditional update slowed down as a collection grew (~3,200/s at 1,000 documents, ~480/s at
// 10,000). MongoDB answers such a filter from the `_id` index and checks the other fields on
// the one document it finds; the IdIndexed* classes below do the same for both backends (the
// memory one of tests and benchmarks, the H2 one of `up` and the fault suite), so tests and
// benchmarks measure the service rather than the stand-in's scans, and a long-lived `up` does
// not slow down as its predictions accumulate. The same holds for an `_id` `$in` list beside
// other fields (the usage ledger's claim of a batch of ended predictions): scanned, each claim
// held the collection for ~100 ms at 100,000 predictions, and at 1,600 creates a second the
// claims of the api's and the runner's ledgers kept it held most of the time.
//
// Two behaviours of real MongoDB that the library lacks, so tests can hold the service to them:
// - An update whose resulting document passes 16 MiB is refused with error 17419 and changes
//   nothing (the library stored it). See Limits.
// - An index requested with the keys (or the name) of an existing one but other options is
//   refused with error 85 (IndexOptionsConflict), or 86 (IndexKeySpecsConflict) for a name
//   with other keys; the library accepted it silently. See Limits.checkIndexes.
// - The `failCommand` failpoint of MongoDB's test commands (`configureFailPoint`, as mongod
//   started with enableTestCommands=1 takes it): fail the next N commands of the named kinds,
//   optionally only those of one client `appName`, with an error code, a closed connection or a
//   write concern error after the command ran. Tests inject a primary's stepdown with it.
//   See FailPoint.

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

public class Launcher {
    static final class Mongo60 implements MongoVersion {
        @Override public List<Integer> getVersionArray() { return List.of(6, 0, 0); }
        @Override public int getWireVersion() { return 17; }
    }

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


    /** MongoDB's document size limit, which the library checks only on documents it decodes. */
    static final class Limits {
        static final int MAX_DOCUMENT_BYTES = 16 * 1024 * 1024;

        static int size(Document document) {
            ByteBuf buffer = Unpooled.buffer();
            try {
                BsonEncoder.encodeDocument(document, buffer);
                return buffer.writerIndex();
            } finally {
                buffer.release();
            }
        }

        /**
         * Called where the library has already applied an update to the stored `document` and
         * its indexes: when the result passes 16 MiB, puts both back as they were and refuses
         * the update as MongoDB does (error 17419), so nothing of it is kept.
         */
        static <P> void checkUpdate(MongoCollection<P> collection, List<Index<P>> indexes, P position,
                                    Document oldDocument, Document document, IntConsumer dataSize) {
            int newSize = size(document);
            if (newSize <= MAX_DOCUMENT_BYTES) {
                return;
            }
            Document updated = document.cloneDeeply();
            for (Index<P> index : indexes) {
                index.updateInPlace(updated, oldDocument, position, collection);
            }
            document.clear();
            document.putAll(oldDocument);
            dataSize.accept(size(oldDocument) - newSize);
            throw new MongoServerError(17419,
                "Resulting document after update is larger than " + MAX_DOCUMENT_BYTES);
        }
    }

    /** Index requests that conflict with existing indexes, refused as MongoDB refuses them. */
    static final class IndexConflicts {
        /** The options two indexes with the same keys must share. */
        static final List<String> OPTIONS = List.of("unique", "sparse", "expireAfterSeconds", "partialFilterExpression");

        /** Handles a `createIndexes` command: refused if it conflicts, else run. */
        static Document check(Document query, Function<String, List<?>> existing, Supplier<Document> run) {
            List<?> current;
            try {
                current = existing.apply((String) query.get("createIndexes"));
            } catch (RuntimeException e) {
                return run.get(); // no such collection yet: nothing to conflict with
            }
            if (current != null && query.get("indexes") instanceof List<?> requested) {
                for (Object r : requested) {
                    for (Object e : current) {
                        if (r instanceof Document want && e instanceof Document have) {
                            conflict(want, have);
                        }
                    }
                }
            }
            return run.get();
        }

        static void conflict(Document want, Document have) {
            boolean sameName = want.get("name") != null && want.get("name").equals(have.get("name"));
            boolean sameKeys = String.valueOf(want.get("key")).equals(String.valueOf(have.get("key")));
            if (sameName && !sameKeys) {
                throw new MongoServerError(86, "IndexKeySpecsConflict",
                    "An existing index has the same name as the requested index but different keys: " + have);
            }
            if (!sameKeys) {
                return;
            }
            for (String option : OPTIONS) {
                if (!String.valueOf(number(want.get(option))).equals(String.valueOf(number(have.get(option))))) {
                    throw new MongoServerError(85, "IndexOptionsConflict",
                        "An equivalent index already exists with a different name or options: " + have);
                }
            }
        }

        /** Numbers of any width compare as longs; false and absent are the same. */
        static Object number(Object value) {
            if (value instanceof Number n) return n.longValue();
            if (Boolean.FALSE.equals(value)) return null;
            return value;
        }
    }

    /** The `failCommand` failpoint of mongod's test commands (see the top of this file). */
    static final class FailPoint {
        static final AttributeKey<String> APP_NAME = AttributeKey.valueOf("appName");
        private static Document data;
        private static int remaining;

        /** Handles `command` of `channel`, failing it if the failpoint says so. */
        static Document handle(Channel channel, String command, Document query, Supplier<Document> run) {
            if (command.equalsIgnoreCase("ismaster") || command.equals("hello")) {
                Object client = query.get("client");
                if (client instanceof Document c && c.get("application") instanceof Document app
                    && app.get("name") instanceof String name) {
                    channel.attr(APP_NAME).set(name);
                }
            }
            if (command.equals("configureFailPoint")) {
                return configure(query);
            }
            Document failing = take(channel.attr(APP_NAME).get(), command);
            if (failing == null) {
                Document reply = run.get();
                // mongod's `hello` says the server's time (`localTime`); the library's does not.
                if (command.equalsIgnoreCase("ismaster") || command.equals("hello")) {
                    reply.putIfAbsent("localTime", new java.util.Date());
                }
                return reply;
            }
            if (Boolean.TRUE.equals(failing.get("closeConnection"))) {
                channel.close();
                return new Document("ok", 0);
            }
            if (failing.get("writeConcernError") instanceof Document concern) {
                Document reply = run.get();
                reply.put("writeConcernError", concern);
                if (failing.get("errorLabels") != null) reply.put("errorLabels", failing.get("errorLabels"));
                return reply;
            }
            Document reply = new Document("ok", 0);
            reply.put("errmsg", "Failing command via 'failCommand' failpoint");
            reply.put("code", ((Number) failing.getOrDefault("errorCode", 1)).intValue());
            if (failing.get("errorLabels") != null) reply.put("errorLabels", failing.get("errorLabels"));
            return reply;
        }

        /** `{configureFailPoint: "failCommand", mode: "off" | "alwaysOn" | {times: N}, data: {...}}` */
        static synchronized Document configure(Document query) {
            if (!"failCommand".equals(query.get("configureFailPoint"))) {
                throw new MongoServerError(2, "only the failCommand failpoint is known");
            }
            Object mode = query.get("mode");
            Document reply = new Document("count", remaining);
            if ("off".equals(mode)) {
                data = null;
                remaining = 0;
            } else if ("alwaysOn".equals(mode)) {
                data = (Document) query.get("data");
                remaining = -1;
            } else if (mode instanceof Document m && m.get("times") instanceof Number times) {
                data = (Document) query.get("data");
                remaining = times.intValue();
            } else {
                throw new MongoServerError(2, "mode must be off, alwaysOn or {times: N}");
            }
            reply.put("ok", 1.0);
            return reply;
        }

        /** The failpoint's data if it fails this command now (counting it down), else null. */
        private static synchronized Document take(String appName, String command) {
            if (data == null || remaining == 0) {
                return null;
            }
            Object commands = data.get("failCommands");
            if (!(commands instanceof List<?> names) || !names.contains(command)) {
                return null;
            }
            Object app = data.get("appName");
            if (app != null && !app.equals(appName)) {
                return null;
            }
            if (remaining > 0 && --remaining == 0) {
                Document last = data;
                data = null;
                return last;
            }
            return data;
        }
    }

    /** A memory collection that finds a document by an `_id` equality first, whatever else the filter holds. */
    static final class IdIndexedCollection extends MemoryCollection {
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

        @Override
        protected void handleUpdate(Integer position, Document oldDocument, Document newDocument) {
            Limits.checkUpdate(this, getIndexes(), position, oldDocument, newDocument, this::updateDataSize);
            super.handleUpdate(position, oldDocument, newDocument);
        }
    }

    static final class IdIndexedDatabase extends MemoryDatabase {
        IdIndexedDatabase(String name, CursorRegistry cursors) { super(name, cursors); }

        @Override
        protected MemoryCollection openOrCreateCollection(String name, CollectionOptions options) {
            return new IdIndexedCollection(this, name, options, cursorRegistry);
        }
    }

    static final class IdIndexedBackend extends MemoryBackend {
        @Override
        public MemoryDatabase openOrCreateDatabase(String name) {
            return new IdIndexedDatabase(name, getCursorRegistry());
        }

        @Override
        public Document handleCommand(Channel channel, String database, String command, Document query) {
            return strictly(channel, command, query, (c, q) -> super.handleCommand(channel, database, c, q));
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
    static final class IdIndexedH2Collection extends H2Collection {
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
                    progress("reading the summaries of " + getFullName() + " (" + data.size() + " documents)");
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
            Limits.checkUpdate(this, getIndexes(), position, oldDocument, newDocument, this::updateDataSize);
            super.handleUpdate(position, oldDocument, newDocument);
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
        static MVStore store;

        IdIndexedH2Database(String name, CursorRegistry cursors) { super(name, store, cursors); }

        @Override
        protected MongoCollection<Object> openOrCreateCollection(String name, CollectionOptions options) {
            String fullName = getFullCollectionNamespace(name);
            progress("opening collection " + fullName);
            MVMap<Object, Document> data = store.openMap("databases." + fullName);
            MVMap<String, Object> meta = store.openMap("meta." + fullName);
            return new IdIndexedH2Collection(this, name, options, data, meta, cursorRegistry);
        }

        @Override
        protected Index<Object> openOrCreateUniqueIndex(String collection, String name, List<IndexKey> keys, boolean sparse) {
            progress("opening index " + getDatabaseName() + "." + collection + "." + name);
            // Opened here first with its keys in KeyOrder: the library's own open (the same name,
            // as the library names it) then finds the map open and keeps it.
            if (KeyOrder.ON) {
                store.openMap(getFullCollectionNamespace(collection) + "._index_" + name,
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

    static final class IdIndexedH2Backend extends H2Backend {
        IdIndexedH2Backend(MVStore store) { super(store); }

        @Override
        protected MongoDatabase openOrCreateDatabase(String name) {
            return new IdIndexedH2Database(name, getCursorRegistry());
        }

        @Override
        public Document handleCommand(Channel channel, String database, String command, Document query) {
            return strictly(channel, command, query, (c, q) -> super.handleCommand(channel, database, c, q));
        }
    }

    /** A backend's own handling of commands (the library's), for one connection and database. */
    interface Commands {
        Document run(String command, Document query);
    }

    /** A command as MongoDB answers it: the failpoint first, then index conflicts, then the library. */
    static Document strictly(Channel channel, String command, Document query, Commands library) {
        if (SLOW_MS < 0) {
            return strictlyUntimed(channel, command, query, library);
        }
        long started = System.nanoTime();
        try {
            return strictlyUntimed(channel, command, query, library);
        } finally {
            long tookMs = (System.nanoTime() - started) / 1_000_000;
            if (tookMs >= SLOW_MS) {
                String text = String.valueOf(query);
                System.err.println("SLOW " + tookMs + " ms " + command + " "
                    + text.substring(0, Math.min(text.length(), 400)));
            }
        }
    }

    /**
     * Commands that took at least this many milliseconds are printed on stderr ("SLOW ..."),
     * when `MONGO_STANDIN_SLOW_MS` is set: a way to find what holds the stand-in under load.
     */
    static final long SLOW_MS = Long.parseLong(System.getenv().getOrDefault("MONGO_STANDIN_SLOW_MS", "-1"));

    static Document strictlyUntimed(Channel channel, String command, Document query, Commands library) {
        if (command.equals("dropDatabase")) {
            Document reply = FailPoint.handle(channel, command, query, () -> library.run(command, query));
            // MongoDB frees a dropped database's files at once; the memory backend's documents
            // would stay in the JVM's heap until a collection of its old generation, which on a
            // heap of gigabytes (the bench's searches leave one) runs concurrently for seconds,
            // taking a core from whatever is measured next. Freed here, at the drop.
            System.gc();
            return reply;
        }
        return FailPoint.handle(channel, command, query, () -> {
            if (command.equals("hello")) {
                // mongod (4.4.2 and later) answers `hello` as a command too, not only in the
                // handshake; the library knows it only as `isMaster`.
                return library.run("isMaster", new Document("isMaster", 1));
            }
            if (!command.equals("createIndexes")) {
                return library.run(command, query);
            }
            Function<String, List<?>> existing =
                collection -> firstBatch(library.run("listIndexes", new Document("listIndexes", collection)));
            return IndexConflicts.check(query, existing, () -> library.run(command, query));
        });
    }

    /** The documents of a command's cursor reply (`cursor.firstBatch`), or null. */
    static List<?> firstBatch(Document reply) {
        if (reply != null && reply.get("cursor") instanceof Document cursor && cursor.get("firstBatch") instanceof List<?> batch) {
            return batch;
        }
        return null;
    }

    /** One line on stdout, at once: what the stand-in is doing while it starts. */
    static void progress(String what) {
        System.out.println("PROGRESS " + what);
        System.out.flush();
    }

    /**
     * Opens the H2 file, compacting it first when live data fills less than half of its chunks
     * (a file only grows; removed data leaves space that the next writes reuse, or this
     * reclaims), by rewriting it whole (MVStoreTool.compact).
     */
    static MVStore openH2(String file) {
        java.io.File f = new java.io.File(file);
        System.out.println("OPENING " + file + " " + f.length());
        System.out.flush();
        MVStore store = openFile(file);
        int live = store.getFileStore().getChunksFillRate();
        progress("file of " + f.length() + " bytes, " + live + "% of it live data");
        if (f.length() > 64L * 1024 * 1024 && live < 50) {
            progress("compacting " + file);
            store.close();
            org.h2.mvstore.MVStoreTool.compact(file, false);
            progress("compacted to " + f.length() + " bytes");
            store = openFile(file);
        }
        return store;
    }

    /**
     * The H2 file opened with a page cache of H2_CACHE_MB (H2's default is 16 MB). A page
     * holds many documents and is decoded whole on a miss: with a day's 20 KB predictions the
     * default cache missed on nearly every look-up of a document by `_id`, and each one decoded
     * a page of documents (measured: 2 ms per document found by a sweep's page of 100).
     */
    static MVStore openFile(String file) {
        return new MVStore.Builder().fileName(file).cacheSize(H2_CACHE_MB).open();
    }

    static final int H2_CACHE_MB = 128;

    public static void main(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = 0;
        String h2File = null;
        boolean exitOnEof = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--host" -> host = args[++i];
                case "--port" -> port = Integer.parseInt(args[++i]);
                case "--h2" -> h2File = args[++i];
                case "--exit-on-stdin-eof" -> exitOnEof = true;
                default -> {
                    System.err.println("unknown argument: " + args[i]);
                    System.exit(2);
                }
            }
        }

        MongoBackend backend;
        if (h2File == null) {
            backend = new IdIndexedBackend();
        } else {
            IdIndexedH2Database.store = openH2(h2File);
            backend = new IdIndexedH2Backend(IdIndexedH2Database.store);
        }
        backend.version(new Mongo60());
        MongoServer server = new MongoServer(backend);
        server.bind(host, port);
        MVStore h2 = IdIndexedH2Database.store;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.shutdown();
            if (h2 != null && !h2.isClosed()) {
                h2.close(10_000); // compacts for up to 10 s
            }
        }));

        InetSocketAddress addr = server.getLocalAddress();
        System.out.println("LISTENING mongodb://" + host + ":" + addr.getPort());
        System.out.flush();

        if (exitOnEof) {
            while (System.in.read() != -1) { /* discard */ }
            System.exit(0);
        }
        Thread.currentThread().join();
    }
}
