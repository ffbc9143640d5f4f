package client

// defaultMaxInFlight is how many tasks of one Group may be in flight at
// once in this process (waiting for a lease, or running) unless
// MaxInFlight says otherwise.
const defaultMaxInFlight = 64

// GroupOption configures a Group (NewGroup) and Map.
type GroupOption func(*groupConfig)

// errorPolicy is what a Group does when a task fails.
type errorPolicy uint8

const (
	failFast errorPolicy = iota
	continueOnError
	handleErrors
)

type groupConfig struct {
	policy      errorPolicy
	maxErrors   int         // continueOnError: stop after this many; 0: never
	onError     func(error) // handleErrors
	maxInFlight int         // WithMaxInFlight
	progress    func(Progress)
	acquireOpts []AcquireOption
	sem         *Semaphore // WithSemaphore
}

func newGroupConfig(opts []GroupOption) groupConfig {
	cfg := groupConfig{maxInFlight: defaultMaxInFlight}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.maxInFlight < 1 {
		cfg.maxInFlight = defaultMaxInFlight
	}
	if cfg.policy == handleErrors && cfg.onError == nil {
		cfg.onError = func(error) {}
	}
	return cfg
}

// ErrorPolicy is what a Group does when a task fails: FailFast (the
// default, and the zero value), ContinueOnError or HandleErrors. Give it
// to NewGroup or Map with WithErrorPolicy.
type ErrorPolicy struct {
	kind      errorPolicy
	maxErrors int
	onError   func(error)
}

// WithErrorPolicy sets the group's error policy (the default is
// FailFast).
func WithErrorPolicy(p ErrorPolicy) GroupOption {
	return func(c *groupConfig) { c.policy, c.maxErrors, c.onError = p.kind, p.maxErrors, p.onError }
}

// FailFast is the default error policy: the first task error stops the
// group. The group's context is cancelled with that error as its cause
// (context.Cause), so running tasks see their context end; tasks not yet
// started are skipped; Go calls made afterwards do nothing; and Wait
// returns that first error. The errors and results of the other tasks are
// dropped. This is errgroup.WithContext's behaviour.
func FailFast() ErrorPolicy { return ErrorPolicy{kind: failFast} }

// ContinueOnError keeps the group going past task errors until maxErrors
// tasks have failed; from then on it starts no new task (tasks waiting for
// a lease or for a local slot are skipped, and later Go calls do nothing),
// but lets running tasks finish. Wait returns every task error joined with
// errors.Join (the maxErrors, plus those of tasks that were running when
// the last of them came). maxErrors <= 0 means no maximum: every task runs,
// and Wait returns all their errors; for a long-lived group use
// HandleErrors instead, which keeps none.
func ContinueOnError(maxErrors int) ErrorPolicy {
	return ErrorPolicy{kind: continueOnError, maxErrors: max(maxErrors, 0)}
}

// HandleErrors is the error policy for queue-style use, where tasks keep
// being added for the life of a service: the group never stops because of
// task errors, and passes each one to fn as it happens instead of keeping
// it (Wait returns nil for them). fn is called one call at a time, on the
// goroutine of the task that failed, which is held until fn returns: keep
// it quick, or hand the error to a channel with a select and a default.
// The task counts as over once fn has returned, so when Wait returns every
// error has been handled. fn must not call the group's Go (to retry a task,
// hand it to the code that calls Go). nil fn drops the errors.
func HandleErrors(fn func(err error)) ErrorPolicy {
	return ErrorPolicy{kind: handleErrors, onError: fn}
}

// WithMaxInFlight bounds the tasks of the group that are in flight in this
// process at once — waiting for their lease, or running — and so its
// goroutines: the group never has more than n goroutines for its tasks,
// whatever the pool's global limit. When n tasks are in flight, Go blocks
// until one finishes (or the group stops). n < 1 means the default, 64.
//
// The pool's limit is what protects the shared resource; n protects this
// process (memory, goroutines, the Session stream's 1024 waiting requests).
// A good n is a little above this process's expected share of the pool's
// limit, so that a permit freed elsewhere finds a task already waiting.
func WithMaxInFlight(n int) GroupOption {
	return func(c *groupConfig) { c.maxInFlight = n }
}

// WithProgress calls fn with the group's counts after they change, for a
// progress bar or a log line. fn is called one call at a time, on a
// goroutine of its own (outside the WithMaxInFlight bound), with the latest
// counts: changes made while fn runs are coalesced into the next call, so
// a slow fn never holds up the tasks. Every Progress passed is consistent
// (see Progress), and Wait returns only after fn has seen the final counts.
func WithProgress(fn func(Progress)) GroupOption {
	return func(c *groupConfig) { c.progress = fn }
}

// WithAcquireOptions sets acquire options (WithWeight, WithTTL,
// WithWaitTimeout, WithPriority, WithDescription) for every task of the group; options passed to
// Go come after them and win.
func WithAcquireOptions(opts ...AcquireOption) GroupOption {
	return func(c *groupConfig) { c.acquireOpts = append(c.acquireOpts, opts...) }
}

// WithSemaphore makes the group's tasks (and Map's calls) take their
// permits from sem, a concurrency share of the pool, with no round trip
// per task, instead of a lease each (see Semaphore). The group's pool
// argument is then not used: sem's pool is. The WithWeight, WithPriority
// and WithWaitTimeout options of the tasks apply to sem's local queue.
func WithSemaphore(sem *Semaphore) GroupOption {
	return func(c *groupConfig) { c.sem = sem }
}
