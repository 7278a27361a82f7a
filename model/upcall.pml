/*
 * upcall.pml - Promela model of the kDAT upcall protocol of dapl-ofi:
 * arm / trigger / dispatch / teardown / free of one EVD.
 *
 * Models (names match the C code; see model/README.md for the table):
 *   src/event/evd_core.c   up_active, up_mark, up_kick, ring_push, ring_pop,
 *                          fill, arm_source, arrived, dfi_evq_post,
 *                          dfi_evq_source_notify, dfi_evq_dequeue,
 *                          dfi_evq_set_upcall, dfi_evq_dispatch, up_quiesce,
 *                          dfi_evq_free_begin
 *   src/event/upcall.c     disp_main (dispatcher threads), dfi_disp_enqueue,
 *                          dfi_disp_forget (run queue, up_queued, up_claims)
 *   src/dat/progress.c     progress_main (fd -> dfi_evq_source_notify),
 *                          dfi_progress_unwatch_cq
 *   tests/unit/fake_source.h  the pull source (one-shot arm, try-wait, fd)
 *
 * One EVD, one dispatcher (struct dfi_disp) with NDISP threads, NPOST pushed
 * events (dfi_evq_post) and NCQ completions landing in the source (CQ) at
 * any instant - including between a fill and an arm (the SMP window).
 * Events carry sequence numbers 0..NEV-1: posts 0..NPOST-1, completions
 * NPOST..NEV-1.  delivered[e] counts hand-outs (upcall or dequeue).
 *
 * Properties (see README.md for how each is checked):
 *  (1) no lost event / exactly once: delivered[e] never exceeds 1 (assert at
 *      each hand-out); at quiescence (`timeout`: nothing else can move) every
 *      event is delivered, dequeued or - only in the DISABLE, TEARDOWN and free
 *      runs - still held by the ring or the source (conservation); in the
 *      runs with a correct consumer (LIVE) every event is delivered/dequeued.
 *      With -DNP (pan -l) no cycle exists: every run reaches quiescence, so
 *      "at quiescence" is "eventually".
 *  (2) SINGLE_INSTANCE and NOTIFY: never two upcalls of the EVD at once.
 *  (3) no upcall passes the policy check after DISABLE returns; none runs
 *      after TEARDOWN returns.
 *  (4) no deadlock (invalid end states), TEARDOWN from inside the upcall
 *      returns an error instead of waiting.
 *  (5) no dispatcher (nor the progress thread) touches the EVD after the
 *      free returned (dfi_disp_forget waited for the claims).
 *
 * Configuration (-D on the spin command line; model/check.sh runs them):
 *   POLICY    P_SINGLE | P_NOTIFY | P_MANY           (default P_SINGLE)
 *   CONSUMER  C_NEW_POLL | C_NPENDING | C_ANY | C_DISABLE | C_TEARDOWN | C_FREE
 *             | C_REARM
 *   NPOST, NCQ, QLEN, BUDGET, NDISP, SPURIOUS, UPCALL_SELF_TEARDOWN
 * Injected defects (each must make the checker fail):
 *   BUG_COUNT_THEN_ARM        consumer polls until empty, then arms (1.3 rule 6)
 *   BUG_CHECK_UNLOCKED        dispatcher checks the policy before the lock (rule 3)
 *   BUG_NO_RECHECK            SINGLE_INSTANCE runner does not re-check (latch lost)
 *   BUG_TEARDOWN_NO_WAIT      TEARDOWN does not wait for up_running == 0
 *   BUG_FORGET_NO_WAIT        dfi_disp_forget does not wait for the claims
 *   BUG_TRYWAIT_NO_RECHECK    the source arms without the look after the arm
 *   BUG_NO_RUNNING_CHECK      dispatch does not skip when an instance runs
 *   BUG_SELF_TEARDOWN_WAITS   TEARDOWN from inside the own upcall waits
 *   BUG_SPIN_REQUEUE          a dispatcher that finds an instance running
 *                             requeues the EVD (busy-waits) instead of the latch
 *   BUG_TAIL_NO_KICK          dfi_evq_dispatch's final arm_source without up_kick
 *   BUG_DEQ_NO_ARM            dfi_evq_dequeue arms only when called on an empty ring
 * (BUG_TAIL_NO_KICK and BUG_DEQ_NO_ARM are what src/event/evd_core.c does as
 * of this model's writing: see README.md, "Defects found in the C code".
 * Without either macro the model is the protocol with both fixes.)
 */

/* ------------------------------------------------------------ constants */

#define P_DISABLE	0	/* DAT_UPCALL_DISABLE */
#define P_SINGLE	1	/* DAT_UPCALL_SINGLE_INSTANCE */
#define P_NOTIFY	2	/* DAT_UPCALL_NOTIFY */
#define P_MANY		3	/* DAT_UPCALL_MANY (100) */
#define P_TEARDOWN	4	/* DAT_UPCALL_TEARDOWN (-1): an argument, never stored */

#define INVOC_NEW	0	/* DAT_UPCALL_INVOC_NEW */
#define INVOC_ANY	1	/* DAT_UPCALL_INVOC_ANY */

#define S_OPEN		0	/* DFI_EVQ_OPEN */
#define S_FREEING	2	/* DFI_EVQ_FREEING */

#define R_OK		0	/* DAT_SUCCESS / trywait 0 */
#define R_EMPTY		1	/* DAT_QUEUE_EMPTY */
#define R_STATE		2	/* DAT_INVALID_STATE */
#define R_EAGAIN	3	/* -EAGAIN */

#define NONE		255	/* no event (NOTIFY passes NULL) */

#define C_NEW_POLL	1	/* INVOC_NEW, then dequeue until DAT_QUEUE_EMPTY */
#define C_NPENDING	2	/* dat_evd_arm_upcall(INVOC_NEW): dequeue *npending */
#define C_ANY		3	/* INVOC_ANY and nothing else */
#define C_DISABLE	4	/* C_NEW_POLL, then DISABLE */
#define C_TEARDOWN	5	/* C_NEW_POLL, then TEARDOWN */
#define C_FREE		6	/* INVOC_ANY, then dat_evd_free while upcalls run */
#define C_REARM		7	/* C_NEW_POLL, DISABLE, then C_NEW_POLL again */

#ifndef POLICY
#define POLICY		P_SINGLE
#endif
#ifndef CONSUMER
#define CONSUMER	C_NEW_POLL
#endif
#ifndef NPOST
#define NPOST		1
#endif
#ifndef NCQ
#define NCQ		2
#endif
#ifndef QLEN
#define QLEN		4	/* ring capacity (q->qlen) */
#endif
#ifndef BUDGET
#define BUDGET		1	/* dfi_disp.budget */
#endif
#ifndef NDISP
#define NDISP		2	/* dispatcher threads */
#endif
#ifndef SPURIOUS
#define SPURIOUS	0	/* source_notify calls with no fd event (progress_all_cqs) */
#endif

#define NEV		(NPOST + NCQ)

/* Every event must end delivered or dequeued (property 1), not merely kept. */
#if CONSUMER == C_NEW_POLL || CONSUMER == C_NPENDING || CONSUMER == C_ANY || CONSUMER == C_REARM
#define LIVE		1
#else
#define LIVE		0
#endif

/* ------------------------------------------------------------ state */

/* struct dfi_evq (the fields the protocol uses) */
byte lk;			/* q->lock: 0 free, else owner _pid + 1 */
byte ring[QLEN];		/* q->ring: event numbers */
byte head;			/* q->head */
byte count;			/* q->count */
byte state = S_OPEN;		/* q->state */
bool src_armed;			/* q->src_armed */
byte up_policy = P_DISABLE;	/* q->up_policy */
byte up_flag;			/* q->up_flag */
bool up_fire;			/* q->up_fire */
byte up_running;		/* q->up_running */
/* run-queue state, under the dispatcher's lock (a leaf lock: atomic here) */
bool up_queued;			/* q->up_queued: on dfi_disp's run queue */
byte up_claims;			/* q->up_claims */

/* the pull source (a libfabric CQ; tests/unit/fake_source.h) */
byte src_rd = NPOST;		/* next completion number to be read */
byte src_n;			/* completions pending in the source */
bool hw_armed;			/* the source's one-shot arm (fi_trywait succeeded) */
bool fd_ready;			/* its fd is readable (one notification) */
bool unwatched;			/* dfi_progress_unwatch_cq done */
bool prog_busy;			/* progress thread inside a batch */
byte spurious = SPURIOUS;

/* ghosts (observers only) */
byte produced[NEV];		/* event entered the EVD (ring or source) */
byte delivered[NEV];		/* handed out: upcall or dequeue */
byte in_upcall;			/* upcalls of the EVD executing now */
bool disable_returned;		/* set_upcall(DISABLE) has returned */
bool teardown_returned;		/* set_upcall(TEARDOWN) has returned */
bool freed;			/* dat_evd_free returned (dfi_evq_fini) */
byte nfinished;			/* producer processes done */

#define up_active	(up_policy != P_DISABLE && state != S_FREEING)

/* Locals every process declares: inline temporaries. */
#define LOCALS	byte n, trc, ev, de, drc, rc, np, budget, pol; bool more, stale, ta, tb, busy, irq

/* ------------------------------------------------------------ granularity
 *
 * Each process's steps are grouped into atomic blocks.  A block ends between
 * any two accesses to the source (fill's read, trywait), which the cq process
 * changes at any instant - that boundary is the SMP window - and at every
 * wait (lock, condition variable, run queue).  Everything else a block does
 * touches fields protected by the EVD lock the process holds (invisible to the
 * others until it unlocks) or the dispatcher's run queue (dfi_disp.lock is a
 * leaf lock: each of its critical sections is one step).  A block that has to
 * wait (lock taken, up_running != 0, claims) loses its atomicity there, so
 * every wait is an interleaving point as in the C code.
 */

#define ACQUIRE		(lk == 0) -> lk = _pid + 1	/* pthread_mutex_lock(&q->lock) */
#define RELEASE		assert(lk == _pid + 1); lk = 0	/* pthread_mutex_unlock(&q->lock) */

/* ------------------------------------------------------------ helpers */

/* pthread_cond_wait(&q->up_idle, &q->lock), inside a loop on up_running;
 * the broadcast comes with up_running falling to 0 under the lock */
inline wait_up_idle()
{
	lk = 0;
	(lk == 0 && up_running == 0) -> lk = _pid + 1
}

/* A hand-out to the consumer (its upcall body, or its dequeue). */
inline deliver(e)
{
	delivered[e]++;
	assert(delivered[e] == 1)	/* (1) exactly once */
}

/* evd_core.c up_mark */
inline up_mark()
{
	if
	:: up_active -> up_fire = true
	:: else -> skip
	fi
}

/* upcall.c dfi_disp_enqueue: no-op when already queued; signals `work` */
inline dfi_disp_enqueue()
{
	up_queued = true
}

/* evd_core.c up_kick */
inline up_kick()
{
	if
	:: up_active && up_fire && count > 0 &&
	   (up_running == 0 || up_policy == P_MANY) -> dfi_disp_enqueue()
	:: else -> skip
	fi
}

/* evd_core.c ring_push (and its up_mark) */
inline ring_push(e)
{
	ring[(head + count) % QLEN] = e;
	count++;
	up_mark()
}

/* evd_core.c ring_pop */
inline ring_pop(e)
{
	e = ring[head];
	head = (head + 1) % QLEN;
	count--
}

/* evd_core.c fill: src->read into free slots; nn = how many (reset by caller) */
inline FILL(nn)
{
	nn = 0;
	do
	:: count < QLEN && src_n > 0 ->
		ring[(head + count) % QLEN] = src_rd;
		src_rd++; src_n--; count++; nn++
	:: else -> break
	od;
	if
	:: nn > 0 -> up_mark()
	:: else -> skip
	fi
}

/* evd_core.c fill_to(q, 1), as dequeue and dispatch call it: one batch,
 * which may stop short of what the source holds (DFI_EVQ_FILL_BATCH, or
 * the ring's end); once it has brought one event it may stop at any
 * point. */
inline FILL_SOME(nn)
{
	nn = 0;
	do
	:: count < QLEN && src_n > 0 ->
		ring[(head + count) % QLEN] = src_rd;
		src_rd++; src_n--; count++; nn++
	:: nn > 0 -> break
	:: else -> break
	od;
	if
	:: nn > 0 -> up_mark()
	:: else -> skip
	fi
}

/* src->trywait (tests/unit/fake_source.h fake_source_trywait; fi_trywait):
 * consume a pending fd notification, then: completions pending -> -EAGAIN,
 * else arm (one-shot) and return 0 - the arm and the look are one step. */
inline TRYWAIT(r)
{
	fd_ready = false;
#ifdef BUG_TRYWAIT_NO_RECHECK
	hw_armed = true;	/* arms without a look: pending completions never fire */
	r = R_OK
#else
	if
	:: src_n > 0 -> r = R_EAGAIN
	:: else -> hw_armed = true; r = R_OK
	fi
#endif
}

/* evd_core.c arm_source (lock held) */
inline arm_source()
{
	do
	:: atomic {
		if
		:: src_armed || count >= QLEN -> break
		:: else -> skip
		fi;
		TRYWAIT(trc);
		if
		:: trc == R_OK -> trc = 0; src_armed = true; break
		:: else -> trc = 0
		fi
	   };
	   atomic {
		FILL(n);
		if
		:: n == 0 -> break	/* pending but unreadable */
		:: else -> n = 0
		fi
	   }
	od
}

/* evd_core.c arrived: no waiter and no CNO in this model */
inline arrived()
{
	if
	:: up_active -> up_kick()
	:: else -> skip
	fi
}

/* ------------------------------------------------------------ EVD calls */

/* evd_core.c dfi_evq_post (the ring never overflows in these configurations:
 * an overflow drops the event by design, reported on the async EVD) */
inline dfi_evq_post(e)
{
	atomic {
		ACQUIRE;
		assert(count < QLEN);
		produced[e] = 1;
		ring_push(e);
		arrived();
		RELEASE
	}
}

/* evd_core.c dfi_evq_source_notify_irq (the progress thread's; source_notify) */
inline dfi_evq_source_notify()
{
	atomic {
		assert(!freed);			/* (5) */
		ACQUIRE;
		src_armed = false;		/* the arm is one-shot: it fired */
		FILL(n);
		n = 0
	};
	arm_source();				/* re-arm before notifying */
	atomic {
		/* dfi_evq_source_notify_irq: the progress thread runs the
		 * upcalls due itself (a dispatcher turn, with a claim) rather
		 * than handing them to a dispatcher thread; only what it will
		 * not run (an instance runs, or nothing is due) is kicked */
		irq = up_active && up_fire && count > 0 &&
		      (up_running == 0 || up_policy == P_MANY);
		if
		:: up_active && !irq -> up_kick()
		:: else -> skip
		fi;
		RELEASE
	};
	if
	:: irq ->
		irq = false;
		atomic { assert(!freed); up_claims++ };	/* (5) */
		dfi_evq_dispatch();
		atomic { assert(!freed); up_claims-- }
	:: else -> skip
	fi
}

/* The pop half of dfi_evq_dequeue (lock held): r = R_OK with e, or R_EMPTY;
 * tb: the source is to be armed before the kick and the unlock. */
inline deq_pop(e, r)
{
	if
	:: count > 0 ->
		ring_pop(e);
		r = R_OK;
#ifndef BUG_DEQ_NO_ARM
		/* the last one out arms: a consumer that dequeues *npending
		 * events and stops must leave the source armed */
		tb = (count == 0 && up_active)
#else
		skip
#endif
	:: else -> r = R_EMPTY
	fi;
	if
	:: !tb ->
		if
		:: r == R_OK -> up_kick()	/* what a fill brought beyond e is new */
		:: else -> skip
		fi;
		RELEASE
	:: else -> skip
	fi
}

/* evd_core.c dfi_evq_dequeue */
inline dfi_evq_dequeue(e, r)
{
	atomic {
		ACQUIRE;
		if
		:: count == 0 ->
			FILL_SOME(n);
			n = 0;
			ta = (count == 0 && up_active)	/* empty: leave it armed */
		:: else -> skip
		fi;
		if
		:: !ta -> deq_pop(e, r)
		:: else -> skip
		fi
	};
	if
	:: ta -> ta = false; arm_source(); atomic { deq_pop(e, r) }
	:: else -> skip
	fi;
	if
	:: tb -> tb = false; arm_source(); atomic { up_kick(); RELEASE }
	:: else -> skip
	fi
}

/* evd_core.c dfi_evq_set_upcall.  self: called from inside this EVD's upcall
 * (up_current == q); r = result; npend = *npending */
inline dfi_evq_set_upcall(policy, flag, self, r, npend)
{
	if
#ifndef BUG_SELF_TEARDOWN_WAITS
	:: policy == P_TEARDOWN && self -> r = R_STATE	/* would wait for itself */
#endif
	:: else ->
		atomic {
			ACQUIRE;
			if
			:: state == S_FREEING -> r = R_STATE; RELEASE
			:: else ->
				if
				:: policy == P_DISABLE || policy == P_TEARDOWN ->
					/* checked under this lock right before every upcall */
					up_policy = P_DISABLE;
					up_fire = false;
#ifndef BUG_TEARDOWN_NO_WAIT
					if
					:: policy == P_TEARDOWN ->
						do
						:: up_running == 0 -> break
						:: else -> wait_up_idle()
						od
					:: else -> skip
					fi;
#endif
					npend = count;
					r = R_OK;
					RELEASE
				:: else ->
					if
					:: up_policy == P_DISABLE ->
						FILL(n);	/* there before the arm: old */
						n = 0
					:: else -> skip
					fi;
					up_policy = policy;
					up_flag = flag;
					if
					:: flag == INVOC_ANY && count > 0 -> up_fire = true
					:: else -> skip
					fi;
					npend = count;
					r = R_OK;
					if
					:: count == 0 -> ta = true	/* arm, then kick */
					:: else -> up_kick(); RELEASE
					fi
				fi
			fi
		};
		if
		:: ta -> ta = false; arm_source(); atomic { up_kick(); RELEASE }
		:: else -> skip
		fi
	fi
}

/* The consumer's upcall function, run with no lock held: e = the event
 * (NONE under NOTIFY), p = the policy it was started under.  Its last step
 * (leaving) is in dfi_evq_dispatch, merged with the relock. */
inline upcall(e, p)
{
	atomic {
		in_upcall++;
		assert(p == P_MANY || in_upcall == 1);		/* (2) */
		assert(!teardown_returned && !freed);		/* (3), (5) */
		if
		:: p != P_NOTIFY -> deliver(e)
		:: else -> skip
		fi
	};
	if
	:: p == P_NOTIFY ->	/* a doorbell: the upcall dequeues until empty */
		do
		:: dfi_evq_dequeue(de, drc);
			if
			:: drc == R_OK -> atomic { deliver(de); de = 0; drc = 0 }
			:: else -> drc = 0; break
			fi
		od
	:: else -> skip
	fi;
#ifdef UPCALL_SELF_TEARDOWN
	/* (4) TEARDOWN from inside the own upcall: an error, not a wait */
	dfi_evq_set_upcall(P_TEARDOWN, INVOC_NEW, true, drc, de);
	assert(drc == R_STATE);
	drc = 0;
	de = 0;
#endif
	skip
}

/* evd_core.c dfi_evq_dispatch(q, budget): by a dispatcher thread holding a
 * claim on q */
inline dfi_evq_dispatch()
{
#ifdef BUG_CHECK_UNLOCKED
	stale = up_active && up_fire;	/* the policy read before the lock */
#endif
	atomic {
		assert(!freed);		/* (5) */
		ACQUIRE;
		budget = BUDGET
	};
	do
	:: atomic {
		if
		:: budget == 0 -> break
		:: else -> budget--
		fi;
#ifdef BUG_CHECK_UNLOCKED
		if
		:: budget == BUDGET - 1 && !stale -> break
		:: budget != BUDGET - 1 && (!up_active || !up_fire) -> break
		:: else -> skip
		fi;
#else
		/* the policy check, under the lock set_upcall changes it under */
		if
		:: !up_active || !up_fire -> break
		:: else -> skip
		fi;
#endif
#ifndef BUG_NO_RUNNING_CHECK
		if
		:: up_running > 0 && up_policy != P_MANY ->
#ifdef BUG_SPIN_REQUEUE
			busy = true;	/* "try again later" instead of the latch */
#endif
			break		/* the running instance re-checks */
		:: else -> skip
		fi;
#endif
		if
		:: count == 0 -> FILL_SOME(n); n = 0
		:: else -> skip
		fi
	   };
	   atomic {
		if
		:: count == 0 -> up_fire = false; break	/* drained: next arrival re-fires */
		:: else -> skip
		fi;
		pol = up_policy;
		if
		:: pol == P_NOTIFY ->
			up_fire = false;	/* one doorbell for what is queued */
			more = true;
			ev = NONE
		:: else ->
			ring_pop(ev);
			if
			:: count == 0 -> FILL_SOME(n); n = 0	/* more_events is the truth */
			:: else -> skip
			fi;
			more = (count > 0);
			if
			:: !more -> up_fire = false
			:: else -> skip
			fi
		fi;
		up_running++;
		/* (3) an upcall starts here: DISABLE/TEARDOWN must not have returned */
		assert(!disable_returned && !teardown_returned);
		if
		:: more && up_policy == P_MANY -> dfi_disp_enqueue()	/* another thread takes the next */
		:: else -> skip
		fi;
		more = false;
		RELEASE
	   };
	   upcall(ev, pol);
	   atomic {
		/* the upcall returns */
		assert(!teardown_returned && !freed);	/* (3), (5) */
		in_upcall--;
		ev = 0;
		pol = 0;
		ACQUIRE;
		up_running--;		/* broadcasts up_idle at 0 */
#ifdef BUG_NO_RECHECK
		RELEASE;
		goto dispatch_done	/* latch lost: no re-check, no kick */
#else
		skip
#endif
	   }
	od;
	atomic {
		budget = 0;
		stale = false;
#ifdef BUG_SPIN_REQUEUE
		if
		:: busy -> busy = false; dfi_disp_enqueue()
		:: else -> skip
		fi;
#endif
		if
		:: up_active && up_fire -> up_kick(); RELEASE	/* budget spent: back of the queue */
		:: up_active && !up_fire && count == 0 -> ta = true
		:: else -> RELEASE
		fi
	};
	if
	:: ta ->
		ta = false;
		arm_source();	/* the next completion must raise an arrival */
		atomic {
#ifndef BUG_TAIL_NO_KICK
			up_kick();	/* what arm_source read is an arrival too */
#endif
			RELEASE
		}
	:: else -> skip
	fi;
dispatch_done:
	skip
}

/* evd_core.c dfi_evq_free_begin (with up_quiesce and upcall.c
 * dfi_disp_forget), then evd.c evd_release: the CQ is closed
 * (dfi_progress_unwatch_cq waits for the progress batch), dfi_evq_fini. */
inline dat_evd_free()
{
	atomic {
		ACQUIRE;
		state = S_FREEING;
		/* up_quiesce */
		up_policy = P_DISABLE;
		up_fire = false;
		do
		:: up_running == 0 -> break
		:: else -> wait_up_idle()
		od;
		RELEASE
	};
	/* dfi_disp_forget: off the run queue, then wait for the claims */
	atomic {
		up_queued = false;
#ifndef BUG_FORGET_NO_WAIT
		(up_claims == 0)
#else
		skip
#endif
	};
	/* (up_quiesce relocks and dfi_evq_free_begin unlocks: nothing between) */
	atomic { !prog_busy -> unwatched = true; freed = true }
}

/* ------------------------------------------------------------ processes */

/* Software / provider events pushed by other threads (dat_evd_post_se, CM
 * events, DTO completions a progress thread read): dfi_evq_post. */
proctype producer()
{
	LOCALS;
	byte i = 0;

	do
	:: i < NPOST -> dfi_evq_post(i); i++
	:: else -> break
	od;
	nfinished++
}

/* Completions landing in the source (the NIC, another CPU): at any instant,
 * under no EVD lock.  One-shot: a landing while armed fires the fd. */
proctype cq()
{
	byte i = 0;

	do
	:: i < NCQ ->
		atomic {
			produced[NPOST + i] = 1;
			src_n++;
			i++;
			if
			:: hw_armed -> hw_armed = false; fd_ready = true
			:: else -> skip
			fi
		}
	:: else -> break
	od;
	nfinished++
}

/* progress.c progress_main: the CQ fd is readable -> dfi_evq_source_notify;
 * SPURIOUS more calls with no fd event (progress_all_cqs). */
proctype progress_main()
{
	LOCALS;

end:	do
	:: atomic { fd_ready && !unwatched -> fd_ready = false; prog_busy = true };
		dfi_evq_source_notify();
		prog_busy = false
	:: atomic { spurious > 0 && !unwatched -> spurious--; prog_busy = true };
		dfi_evq_source_notify();
		prog_busy = false
	od
}

/* upcall.c disp_main: pop q with a claim, dispatch, drop the claim */
proctype disp_main()
{
	LOCALS;

end:	do
	:: atomic { up_queued -> up_queued = false; up_claims++ };
		dfi_evq_dispatch();
		atomic { assert(!freed); up_claims-- }	/* (5) */
	od
}

/* The consumer: arm, then its part of the protocol. */
proctype consumer()
{
	LOCALS;
	byte k;

#if CONSUMER == C_NEW_POLL || CONSUMER == C_DISABLE || CONSUMER == C_TEARDOWN || CONSUMER == C_REARM
#ifdef BUG_COUNT_THEN_ARM
	/* wrong order: poll until empty, then arm - an arrival between is lost */
	do
	:: dfi_evq_dequeue(ev, rc);
		if
		:: rc == R_OK -> atomic { deliver(ev); ev = 0; rc = 0 }
		:: else -> rc = 0; break
		fi
	od;
	dfi_evq_set_upcall(POLICY, INVOC_NEW, false, rc, np);
#else
	/* the edge rule: enable, then dequeue until DAT_QUEUE_EMPTY once more */
	dfi_evq_set_upcall(POLICY, INVOC_NEW, false, rc, np);
	do
	:: dfi_evq_dequeue(ev, rc);
		if
		:: rc == R_OK -> atomic { deliver(ev); ev = 0; rc = 0 }
		:: else -> rc = 0; break
		fi
	od;
#endif
#if CONSUMER == C_DISABLE
	dfi_evq_set_upcall(P_DISABLE, INVOC_NEW, false, rc, np);
	disable_returned = true;
#elif CONSUMER == C_TEARDOWN
	dfi_evq_set_upcall(P_TEARDOWN, INVOC_NEW, false, rc, np);
	assert(rc == R_OK);
	teardown_returned = true;
#elif CONSUMER == C_REARM
	/* off and on again, with upcalls possibly still running from the first arm */
	dfi_evq_set_upcall(P_DISABLE, INVOC_NEW, false, rc, np);
	dfi_evq_set_upcall(POLICY, INVOC_NEW, false, rc, np);
	do
	:: dfi_evq_dequeue(ev, rc);
		if
		:: rc == R_OK -> atomic { deliver(ev); ev = 0; rc = 0 }
		:: else -> rc = 0; break
		fi
	od;
#endif
	skip

#elif CONSUMER == C_NPENDING
	/* dat_evd_arm_upcall: dequeue exactly *npending events, then rely on upcalls */
	dfi_evq_set_upcall(POLICY, INVOC_NEW, false, rc, np);
	k = 0;
	do
	:: k < np ->
		dfi_evq_dequeue(ev, rc);
		if
		:: rc == R_OK -> atomic { deliver(ev); ev = 0; rc = 0; k++ }
		:: else -> break	/* an upcall took some of them */
		fi
	:: else -> break
	od

#elif CONSUMER == C_ANY
	dfi_evq_set_upcall(POLICY, INVOC_ANY, false, rc, np)

#elif CONSUMER == C_FREE
	dfi_evq_set_upcall(POLICY, INVOC_ANY, false, rc, np);
	(nfinished == 2);	/* refs == 0: the EPs feeding it are gone */
	dat_evd_free()
#endif
}

/* Quiescence: nothing else can move (`timeout`).  Every event must be
 * accounted for exactly once; with a correct consumer, handed out. */
active proctype checker()
{
	byte e, i, held;

	timeout ->
	atomic {
		e = 0;
		do
		:: e < NEV ->
			held = 0;
			i = 0;
			do
			:: i < count ->
				if
				:: ring[(head + i) % QLEN] == e -> held++
				:: else -> skip
				fi;
				i++
			:: else -> break
			od;
			if
			:: e >= src_rd && e < src_rd + src_n -> held++
			:: else -> skip
			fi;
			assert(delivered[e] + held == produced[e]);	/* conservation */
#if LIVE
			assert(produced[e] == 1 && delivered[e] == 1);	/* (1) no lost wakeup */
#endif
			e++
		:: else -> break
		od
	}
}

init
{
	atomic {
		run producer();
		run cq();
		run progress_main();
		run consumer();
#if NDISP >= 1
		run disp_main();
#endif
#if NDISP >= 2
		run disp_main();
#endif
	}
}
