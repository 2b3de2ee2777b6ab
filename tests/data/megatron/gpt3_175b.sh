# NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553 examples/gpt3/train_gpt3_175b_distributed.sh:
# its launch line with the bash arrays expanded (GPUS_PER_NODE=8, NUM_NODES set to 16 for the 128 GPUs that tp 8 x
# pp 16 need; the path variables replaced by literal paths)
torchrun --nproc_per_node 8 --nnodes 16 --master_addr localhost --master_port 29500 pretrain_gpt.py \
    --num-layers 96 \
    --hidden-size 12288 \
    --num-attention-heads 96 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --attention-backend auto \
    --micro-batch-size 1 \
    --global-batch-size 1536 \
    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536" \
    --train-iters 500000 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --init-method-std 0.006 \
    --clip-grad 1.0 \
    --fp16 \
    --lr 6.0e-5 \
    --lr-decay-style cosine \
    --min-lr 6.0e-6 \
    --lr-warmup-fraction .001 \
    --lr-decay-iters 430000 \
	--tensor-model-parallel-size 8 \
	--pipeline-model-parallel-size 16 \
    --data-path /data/gpt_text_document \
    --vocab-file /data/gpt2-vocab.json \
    --merge-file /data/gpt2-merges.txt \
    --split 949,50,1 \
    --log-interval 100 \
    --save-interval 10000 \
    --eval-interval 1000 \
    --save /ckpt \
    --load /ckpt \
    --eval-iters 10 \
    --tensorboard-dir /tb
